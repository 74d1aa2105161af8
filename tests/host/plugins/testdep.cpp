extern "C" __attribute__((visibility("default"))) int symmem_testdep_value() {
  return 42;
}
