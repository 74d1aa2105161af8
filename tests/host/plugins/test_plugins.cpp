// Test plugins for the registry (see tests/host/CMakeLists.txt). One source, built several times:
//   SYMMEM_TEST_PLUGIN_NAME   the backend name the plugin reports
//   SYMMEM_TEST_PLUGIN_ABI    the ABI version it claims
//   SYMMEM_TEST_PLUGIN_DEP    call into libsymmem_testdep (so that loading needs that library)
#include <memory>
#include <string>

#include "symmem/backend.hpp"

#ifdef SYMMEM_TEST_PLUGIN_DEP
extern "C" int symmem_testdep_value();
#endif

namespace {

class TestBackend final : public symmem::Backend {
 public:
  // Claims CPU barriers (so that the core routes CPU allocations to it); can_serve refuses.
  TestBackend()
      : symmem::Backend({{symmem::OpSet::of({symmem::OpKind::barrier}), symmem::DTypeSet{},
                          symmem::DeviceTypeSet::of(symmem::DeviceType::cpu)}}) {}
  const char* name() const override { return SYMMEM_TEST_PLUGIN_NAME; }
  bool can_serve(const symmem::Group&, symmem::Device, std::string* why) const override {
    if (why != nullptr) *why = "the test plugin serves nothing";
    return false;
  }
  std::shared_ptr<symmem::BackendMemory> allocate(const symmem::Group&,
                                                  const symmem::RendezvousInfo&) override {
    return nullptr;
  }
  void run(const symmem::OpArgs&) override {}
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int symmem_plugin_abi_version() {
#ifdef SYMMEM_TEST_PLUGIN_DEP
  (void)symmem_testdep_value();
#endif
  return SYMMEM_TEST_PLUGIN_ABI;
}

extern "C" __attribute__((visibility("default"))) symmem::Backend* symmem_plugin_create() {
  return new TestBackend();
}
