# Static twins of imported libraries, for the tools the wheel ships (cli/wheel).
#
# A shared gRPC, protobuf or absl needs the system's libstdc++.so.6, and Debian 12's needs glibc
# 2.36, so a wheel that bundles them can claim no older glibc. The C libraries (OpenSSL, zlib,
# c-ares, elfutils' libdw and libelf with the compression libraries they use) of Debian 12 need
# glibc 2.34's symbol versions. Linked from their static archives (libgrpc++.a beside libgrpc++.so,
# as Debian ships both) the tools carry the code they use, linked against the glibc 2.28 stubs of
# cli/wheel/glibc-stubs, and need glibc 2.28 alone.
#
#   fr_static_twin(OUT target)
#
# sets OUT to a target that links as `target` does, with every library of the gRPC::, protobuf::,
# absl::, re2::, OpenSSL::, ZLIB::, c-ares:: and PkgConfig:: families (and what they link,
# recursively) taken from its .a; a PkgConfig:: target adds the libraries its module's static
# link names (`pkg-config --static`). glibc's own libraries (dl, m, rt, pthread...) are linked as
# before. A library with no .a beside its .so is a configure error.
#
#   fr_static_or_shared(OUT target)
#
# sets OUT to a generator expression naming the twin for a target whose FR_STATIC_DEPS property is
# true and `target` for any other: a library links it PUBLIC (or PRIVATE) and each executable
# picks, so the tests keep the shared libraries and the wheel's tools take the archives. Where
# FR_WHEEL_TOOLS is off (no wheel tools in this build) OUT is `target`, and no archive is needed.
set(FR_STATIC_FAMILIES "^(gRPC|protobuf|absl|re2|OpenSSL|ZLIB|c-ares|PkgConfig)::")
# Linked as named: glibc's, and GCC's libatomic, which absl asks for --as-needed (nothing is).
set(FR_GLIBC_LIBS "^(c|dl|m|rt|pthread|util|resolv|atomic)$")

function(_fr_static_archive_of lib out)
  string(REGEX REPLACE "\\.so(\\.[0-9.]+)?$" ".a" archive "${lib}")
  if(archive STREQUAL lib OR NOT EXISTS "${archive}")
    message(FATAL_ERROR "fr_static_twin: no static archive beside ${lib}")
  endif()
  set(${out} "${archive}" PARENT_SCOPE)
endfunction()

# The location of an imported library target (any configuration), or "".
function(_fr_imported_location target out)
  set(loc "")
  foreach(prop IMPORTED_LOCATION IMPORTED_LOCATION_NONE IMPORTED_LOCATION_RELEASE
               IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_NOCONFIG)
    get_target_property(v ${target} ${prop})
    if(v)
      set(loc "${v}")
      break()
    endif()
  endforeach()
  set(${out} "${loc}" PARENT_SCOPE)
endfunction()

# A library named by -lNAME in a twinned target's links (re2's, from pkg-config): its archive, or
# -lNAME itself for one of FR_GLIBC_LIBS.
function(_fr_static_name name dirs out)
  if(name MATCHES "${FR_GLIBC_LIBS}")
    set(${out} "-l${name}" PARENT_SCOPE)
    return()
  endif()
  find_library(_fr_archive_${name} NAMES lib${name}.a HINTS ${dirs} NO_CACHE)
  if(NOT _fr_archive_${name})
    message(FATAL_ERROR "fr_static_twin: no static archive lib${name}.a")
  endif()
  set(${out} "${_fr_archive_${name}}" PARENT_SCOPE)
endfunction()

function(fr_static_twin out target)
  if(TARGET ${target})
    get_target_property(aliased ${target} ALIASED_TARGET)
    if(aliased)
      set(target ${aliased})
    endif()
  endif()
  if(NOT TARGET ${target} OR NOT target MATCHES "${FR_STATIC_FAMILIES}")
    set(${out} "${target}" PARENT_SCOPE)
    return()
  endif()
  string(MAKE_C_IDENTIFIER "fr_static_${target}" twin)
  if(NOT TARGET ${twin})
    _fr_imported_location(${target} location)
    if(location)
      _fr_static_archive_of("${location}" archive)
      add_library(${twin} STATIC IMPORTED GLOBAL)
      set_target_properties(${twin} PROPERTIES IMPORTED_LOCATION "${archive}")
    else()
      add_library(${twin} INTERFACE IMPORTED GLOBAL)
    endif()
    get_target_property(dirs ${target} INTERFACE_LINK_DIRECTORIES)
    if(NOT dirs)
      set(dirs "")
    endif()
    get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
    set(twin_links "")
    if(links)
      foreach(item ${links})
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
        if(TARGET ${item})
          fr_static_twin(dep ${item})
        elseif(item MATCHES "^-l([A-Za-z0-9_+]+)$")
          _fr_static_name(${CMAKE_MATCH_1} "${dirs}" dep)
        elseif(item MATCHES "^/.*\\.so(\\.[0-9.]+)?$")
          _fr_static_archive_of("${item}" dep)
        else()
          set(dep "${item}")
        endif()
        list(APPEND twin_links "${dep}")
      endforeach()
    endif()
    # A pkg-config module's static link: what its archives need, after them.
    if(target MATCHES "^PkgConfig::(.+)$")
      foreach(name ${${CMAKE_MATCH_1}_STATIC_LIBRARIES})
        _fr_static_name(${name} "${dirs}" dep)
        list(APPEND twin_links "${dep}")
      endforeach()
    endif()
    set_target_properties(${twin} PROPERTIES INTERFACE_LINK_LIBRARIES "${twin_links}")
  endif()
  set(${out} ${twin} PARENT_SCOPE)
endfunction()

function(fr_static_or_shared out target)
  if(NOT FR_WHEEL_TOOLS)
    set(${out} ${target} PARENT_SCOPE)
    return()
  endif()
  fr_static_twin(twin ${target})
  set(${out} "$<IF:$<BOOL:$<TARGET_PROPERTY:FR_STATIC_DEPS>>,${twin},${target}>" PARENT_SCOPE)
endfunction()
