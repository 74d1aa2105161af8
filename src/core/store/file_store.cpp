// FileStore: a store in one directory of a (possibly shared) filesystem.
//
// NOTE [file store layout and concurrency]
// Each key is one file "k.<name>", where <name> is the key percent-encoded (bytes outside
// [A-Za-z0-9._-] become %XX), or "h.<hash>" when that would be longer than kMaxNameBytes. A file
// holds: u32 key length (little-endian), the key, then the value; readers check the key, so two
// keys with one hash are detected instead of confused.
// Writers never modify a key file in place: they write a temporary file "t.<host>.<pid>.<n>" and
// rename() it over the key file, so a reader sees the old or the new value, never a mix.
// Mutations take flock() on "<dir>/lock" through a fresh open file description (so threads of
// one process exclude each other too): set/multi_set/remove take it shared, add/compare_set take
// it exclusive, so a read-modify-write cannot interleave with another write. Readers take no
// lock. Blocking reads poll (1 ms, growing to 20 ms) until their deadline; this works on network
// filesystems where inotify does not.

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <thread>

#include "core/check.hpp"
#include "core/log.hpp"
#include "core/store/store.hpp"
#include "symmem/store.hpp"

namespace symmem {

namespace {

constexpr size_t kMaxNameBytes = 200;
// Numbers the temporary files of this process (all FileStore objects share it).
std::atomic<uint64_t> g_tmp_counter{0};

std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

uint64_t fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string file_name(const std::string& key) {
  static const char* hex = "0123456789abcdef";
  std::string out = "k.";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
    if (out.size() > kMaxNameBytes) break;
  }
  if (out.size() <= kMaxNameBytes) return out;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "h.%016llx%016llx",
                static_cast<unsigned long long>(fnv1a(key, 0)),
                static_cast<unsigned long long>(fnv1a(key, 0x9e3779b97f4a7c15ull)));
  return buf;
}

// Holds flock() on <dir>/lock for its lifetime.
class DirLock {
 public:
  DirLock(const std::string& dir, bool exclusive, std::string_view op) {
    std::string path = dir + "/lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      throw_error(ErrorCode::System, op, -1, "cannot open " + path + ": " + errno_text(errno));
    }
    while (::flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd_);
      throw_error(ErrorCode::System, op, -1, "flock " + path + ": " + errno_text(err));
    }
  }
  ~DirLock() { ::close(fd_); }  // closing releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

struct FileStore::Impl {
  std::string dir;
  std::string host;

  std::string path_of(const std::string& key) const { return dir + "/" + file_name(key); }

  // Reads the value of `key`; false when absent.
  bool read(std::string_view op, const std::string& key, Bytes* value) const {
    std::string path = path_of(key);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return false;
      throw_error(ErrorCode::System, op, -1, "cannot open " + path + ": " + errno_text(errno));
    }
    Bytes data;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) data.reserve(static_cast<size_t>(st.st_size));
    uint8_t buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        data.insert(data.end(), buf, buf + n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        throw_error(ErrorCode::System, op, -1, "cannot read " + path + ": " + errno_text(err));
      }
      break;
    }
    ::close(fd);
    uint32_t klen = 0;
    if (data.size() >= 4) {
      klen = uint32_t(data[0]) | uint32_t(data[1]) << 8 | uint32_t(data[2]) << 16 |
             uint32_t(data[3]) << 24;
    }
    if (data.size() < 4 || data.size() - 4 < klen) {
      throw_error(ErrorCode::Internal, op, -1, "file " + path + " is corrupt (truncated header)");
    }
    if (klen != key.size() || std::memcmp(data.data() + 4, key.data(), klen) != 0) {
      throw_error(ErrorCode::Internal, op, -1,
                  "file " + path + " holds another key (hash collision): " +
                      std::string(reinterpret_cast<const char*>(data.data() + 4), klen));
    }
    value->assign(data.begin() + 4 + klen, data.end());
    return true;
  }

  // Writes `value` under `key` atomically (temporary file + rename). Caller holds a DirLock.
  void write(std::string_view op, const std::string& key, const Bytes& value) {
    std::string tmp = dir + "/t." + host + "." + std::to_string(::getpid()) + "." +
                      std::to_string(g_tmp_counter.fetch_add(1));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      throw_error(ErrorCode::System, op, -1, "cannot create " + tmp + ": " + errno_text(errno));
    }
    Bytes head(4);
    uint32_t klen = static_cast<uint32_t>(key.size());
    for (int i = 0; i < 4; ++i) head[i] = static_cast<uint8_t>(klen >> (8 * i));
    head.insert(head.end(), key.begin(), key.end());
    auto write_all = [&](const uint8_t* p, size_t n) {
      while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<size_t>(w);
      }
      return true;
    };
    bool ok = write_all(head.data(), head.size()) && write_all(value.data(), value.size());
    int err = errno;
    if (::close(fd) != 0 && ok) {
      ok = false;
      err = errno;
    }
    if (ok && ::rename(tmp.c_str(), path_of(key).c_str()) != 0) {
      ok = false;
      err = errno;
    }
    if (!ok) {
      ::unlink(tmp.c_str());
      throw_error(
          ErrorCode::System, op, -1,
          "cannot write key '" + key.substr(0, 256) + "' in " + dir + ": " + errno_text(err));
    }
  }

  bool exists(const std::string& key) const {
    struct stat st {};
    return ::stat(path_of(key).c_str(), &st) == 0;
  }

  // Polls until every key can be read; returns their values.
  std::vector<Bytes> wait_read(std::string_view op, const std::vector<std::string>& keys,
                               Millis timeout) const {
    timeout = detail::resolve_timeout(timeout);
    const auto deadline = detail::deadline_for(timeout);
    std::vector<Bytes> out(keys.size());
    std::vector<bool> have(keys.size(), false);
    Millis pause(1);
    for (;;) {
      std::vector<std::string> missing;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!have[i]) have[i] = read(op, keys[i], &out[i]);
        if (!have[i]) missing.push_back(keys[i]);
      }
      if (missing.empty()) return out;
      auto now = detail::Clock::now();
      if (now >= deadline) detail::throw_store_timeout(op, missing, timeout);
      auto left = std::chrono::duration_cast<Millis>(deadline - now) + Millis(1);
      std::this_thread::sleep_for(std::min(pause, left));
      pause = std::min(pause * 2, Millis(20));
    }
  }
};

FileStore::FileStore(const std::string& path) : impl_(std::make_unique<Impl>()) {
  const char* op = "FileStore";
  SYMMEM_CHECK_ARG(op, -1, !path.empty(), "path", "is empty");
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  // mkdir -p, private to the user.
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') {
      std::string part = dir.substr(0, pos);
      if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
        throw_error(ErrorCode::System, op, -1,
                    "cannot create directory " + part + ": " + errno_text(errno));
      }
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw_invalid_argument(op, -1, "path", "'" + dir + "' is not a directory");
  }
  impl_->dir = dir;
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  impl_->host = host;
  for (char& c : impl_->host) {
    if (c == '/' || c == '.') c = '_';
  }
  SYMMEM_LOG(INFO, STORE) << "file store in " << dir;
}

FileStore::~FileStore() = default;

void FileStore::set(const std::string& key, const Bytes& value) {
  detail::check_key("FileStore::set", key);
  detail::check_value("FileStore::set", key, value);
  DirLock lock(impl_->dir, false, "FileStore::set");
  impl_->write("FileStore::set", key, value);
}

Bytes FileStore::get(const std::string& key, Millis timeout) {
  detail::check_key("FileStore::get", key);
  return std::move(impl_->wait_read("FileStore::get", {key}, timeout)[0]);
}

void FileStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  detail::check_keys("FileStore::wait", keys);
  timeout = detail::resolve_timeout(timeout);
  const auto deadline = detail::deadline_for(timeout);
  Millis pause(1);
  for (;;) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!impl_->exists(k)) missing.push_back(k);
    }
    if (missing.empty()) return;
    auto now = detail::Clock::now();
    if (now >= deadline) detail::throw_store_timeout("FileStore::wait", missing, timeout);
    auto left = std::chrono::duration_cast<Millis>(deadline - now) + Millis(1);
    std::this_thread::sleep_for(std::min(pause, left));
    pause = std::min(pause * 2, Millis(20));
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const char* op = "FileStore::add";
  detail::check_key(op, key);
  DirLock lock(impl_->dir, true, op);
  Bytes cur;
  int64_t now = impl_->read(op, key, &cur) ? detail::parse_counter(op, key, cur) : 0;
  int64_t result = detail::add_counter(op, key, now, delta);
  impl_->write(op, key, detail::format_counter(result));
  return result;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  const char* op = "FileStore::compare_set";
  detail::check_key(op, key);
  detail::check_value(op, key, desired);
  DirLock lock(impl_->dir, true, op);
  Bytes cur;
  bool present = impl_->read(op, key, &cur);
  if (present ? cur == expected : expected.empty()) {
    impl_->write(op, key, desired);
    return desired;
  }
  return present ? cur : Bytes();
}

std::vector<Bytes> FileStore::multi_get(const std::vector<std::string>& keys, Millis timeout) {
  detail::check_keys("FileStore::multi_get", keys);
  return impl_->wait_read("FileStore::multi_get", keys, timeout);
}

void FileStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  const char* op = "FileStore::multi_set";
  SYMMEM_CHECK_ARG(op, -1, keys.size() == values.size(), "values",
                   "has " << values.size() << " entries but 'keys' has " << keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    detail::check_key(op, keys[i]);
    detail::check_value(op, keys[i], values[i]);
  }
  DirLock lock(impl_->dir, false, op);
  for (size_t i = 0; i < keys.size(); ++i) impl_->write(op, keys[i], values[i]);
}

bool FileStore::remove(const std::string& key) {
  const char* op = "FileStore::remove";
  detail::check_key(op, key);
  DirLock lock(impl_->dir, false, op);
  std::string path = impl_->path_of(key);
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw_error(ErrorCode::System, op, -1, "cannot remove " + path + ": " + errno_text(errno));
}

bool FileStore::check(const std::vector<std::string>& keys) {
  detail::check_keys("FileStore::check", keys);
  for (const auto& k : keys) {
    if (!impl_->exists(k)) return false;
  }
  return true;
}

int64_t FileStore::num_keys() {
  DIR* d = ::opendir(impl_->dir.c_str());
  if (d == nullptr) {
    throw_error(ErrorCode::System, "FileStore::num_keys", -1,
                "cannot list " + impl_->dir + ": " + errno_text(errno));
  }
  int64_t n = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "k.", 2) == 0 || std::strncmp(e->d_name, "h.", 2) == 0) ++n;
  }
  ::closedir(d);
  return n;
}

}  // namespace symmem
