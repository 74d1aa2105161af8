#pragma once

// Factories for the typed store test suite: each makes a fresh, empty store (and keeps whatever
// it needs alive, e.g. a server or a directory). another() gives a second, independent handle on
// the same store (another client), as a second process would have.

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "symmem/store.hpp"

namespace symmem::test {

struct HashStoreFactory {
  static constexpr const char* kName = "HashStore";
  std::shared_ptr<Store> make() { return std::make_shared<HashStore>(); }
  std::shared_ptr<Store> another(const std::shared_ptr<Store>& first) { return first; }
};

struct TcpStoreFactory {
  static constexpr const char* kName = "TcpStore";
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> make() {
    server = TcpStoreServer::start("127.0.0.1", 0, "secret-token");
    return another(nullptr);
  }
  std::shared_ptr<Store> another(const std::shared_ptr<Store>&) {
    return std::make_shared<TcpStore>("127.0.0.1", server->port(), "secret-token", Millis(5000));
  }
};

struct FileStoreFactory {
  static constexpr const char* kName = "FileStore";
  std::string base, dir;
  ~FileStoreFactory() {
    std::error_code ec;
    if (!base.empty()) std::filesystem::remove_all(base, ec);
  }
  std::shared_ptr<Store> make() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "symmem-fs-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    base = tmpl;
    dir = tmpl + "/store";  // FileStore creates it
    return another(nullptr);
  }
  std::shared_ptr<Store> another(const std::shared_ptr<Store>&) {
    return std::make_shared<FileStore>(dir);
  }
};

}  // namespace symmem::test
