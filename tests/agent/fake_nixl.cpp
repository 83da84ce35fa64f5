// A libnixl.so that is not the NIXL 1.5 the agent knows: it has nixlAgent's constructor and
// getXferStatus under 1.5's mangled names, but no postXferReq. The agent must turn NIXL recording
// off with one line and keep forwarding every call (tests/agent/nixl_test.cpp).
#include <string>

extern "C" {
__attribute__((visibility("default"))) int fr_fake_nixl_ctor_calls = 0;
}

// nixlAgent::nixlAgent(const std::string&, const nixlAgentConfig&)
void fake_nixl_ctor(void* self, const std::string& name, const void* cfg) __asm__(
    "_ZN9nixlAgentC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK15nixlAgentConfig");
__attribute__((visibility("default"))) void fake_nixl_ctor(void* self, const std::string& name,
                                                           const void*) {
  ++fr_fake_nixl_ctor_calls;
  *static_cast<size_t*>(self) = name.size();
}

// nixl_status_t nixlAgent::getXferStatus(nixlXferReqH*) const
int fake_nixl_status(const void* self,
                     void* req) __asm__("_ZNK9nixlAgent13getXferStatusEP12nixlXferReqH");
__attribute__((visibility("default"))) int fake_nixl_status(const void*, void*) { return 1; }
