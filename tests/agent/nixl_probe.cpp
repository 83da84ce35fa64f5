// Calls two methods of nixlAgent through the PLT, as NIXL's Python binding does, against the
// fake libnixl.so (fake_nixl.cpp); prints what reached the library.
#include <cstdio>
#include <string>

extern "C" int fr_fake_nixl_ctor_calls;
void nixl_ctor(void* self, const std::string& name, const void* cfg) __asm__(
    "_ZN9nixlAgentC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK15nixlAgentConfig");
int nixl_status(const void* self,
                void* req) __asm__("_ZNK9nixlAgent13getXferStatusEP12nixlXferReqH");

int main() {
  alignas(16) unsigned char agent[512] = {};
  alignas(16) unsigned char config[256] = {};
  nixl_ctor(agent, "probe-agent", config);
  int status = nixl_status(agent, nullptr);
  std::printf("ctor_calls=%d\nname_size=%zu\nstatus=%d\n", fr_fake_nixl_ctor_calls,
              *reinterpret_cast<size_t*>(agent), status);
  return 0;
}
