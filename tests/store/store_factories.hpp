#pragma once

// Factories for the typed store test suite: each makes a fresh, empty store (and keeps whatever
// it needs alive, e.g. a server or a directory).

#include <memory>

#include "symmem/store.hpp"

namespace symmem::test {

struct HashStoreFactory {
  static constexpr const char* kName = "HashStore";
  std::shared_ptr<Store> make() { return std::make_shared<HashStore>(); }
  // A second handle on the same store (another "client").
  std::shared_ptr<Store> another(const std::shared_ptr<Store>& first) { return first; }
};

}  // namespace symmem::test
