#include "core/store/store.hpp"

#include <charconv>
#include <memory>

#include "core/check.hpp"
#include "symmem/env.hpp"
#include "symmem/error.hpp"

namespace symmem {

Bytes to_bytes(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

std::string to_string(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

Store::~Store() = default;

bool Store::set_on_disconnect(const std::string&, const Bytes&) {
  return false;
}

void Store::cancel_on_disconnect(const std::string&) {}

namespace detail {

void check_key(std::string_view op, const std::string& key) {
  SYMMEM_CHECK_ARG(op, -1, !key.empty(), "key", "is empty");
  SYMMEM_CHECK_ARG(op, -1, key.size() <= kStoreMaxKeyBytes, "key",
                   "has " << key.size() << " bytes, more than the limit kStoreMaxKeyBytes = "
                          << kStoreMaxKeyBytes << " (key starts '" << key.substr(0, 64) << "')");
}

void check_keys(std::string_view op, const std::vector<std::string>& keys) {
  for (const auto& k : keys) check_key(op, k);
}

void check_value(std::string_view op, const std::string& key, const Bytes& value) {
  SYMMEM_CHECK_ARG(
      op, -1, value.size() <= kStoreMaxValueBytes, "value",
      "of key '" << key.substr(0, 256) << "' has " << value.size()
                 << " bytes, more than the limit kStoreMaxValueBytes = " << kStoreMaxValueBytes);
}

std::string join_keys(const std::vector<std::string>& keys, size_t max_listed) {
  std::string out;
  size_t n = std::min(keys.size(), max_listed);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    out += "'";
    out += keys[i].size() > 256 ? keys[i].substr(0, 256) + "..." : keys[i];
    out += "'";
  }
  if (keys.size() > n) out += " and " + std::to_string(keys.size() - n) + " more";
  return out;
}

void throw_store_timeout(std::string_view op, const std::vector<std::string>& missing,
                         Millis timeout) {
  throw_error(ErrorCode::Timeout, op, -1,
              "timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
                  (missing.size() == 1 ? "key " : std::to_string(missing.size()) + " keys ") +
                  join_keys(missing));
}

int64_t parse_counter(std::string_view op, const std::string& key, const Bytes& value) {
  int64_t v = 0;
  const char* first = reinterpret_cast<const char*>(value.data());
  const char* last = first + value.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  SYMMEM_CHECK_ARG(op, -1, !value.empty() && ec == std::errc() && ptr == last, "key",
                   "'" << key.substr(0, 256) << "' holds " << value.size()
                       << " bytes that are not a decimal integer, so add() cannot count on it");
  return v;
}

Bytes format_counter(int64_t value) {
  return to_bytes(std::to_string(value));
}

int64_t add_counter(std::string_view op, const std::string& key, int64_t a, int64_t b) {
  int64_t r = 0;
  SYMMEM_CHECK_ARG(op, -1, !__builtin_add_overflow(a, b, &r), "delta",
                   "= " << b << " overflows the counter at key '" << key.substr(0, 256) << "' (now "
                        << a << ")");
  return r;
}

}  // namespace detail
}  // namespace symmem

namespace symmem {

namespace {
std::shared_ptr<Store> make_file_store(const std::string& path) {
  return std::make_shared<FileStore>(path);
}
}  // namespace

std::shared_ptr<Store> Store::connect(const std::string& url, const std::string& token,
                                      Millis timeout) {
  const char* op = "Store::connect";
  const std::string tcp = "tcp://", file = "file://";
  if (url.rfind(file, 0) == 0) {
    std::string path = url.substr(file.size());
    SYMMEM_CHECK_ARG(op, -1, !path.empty() && path[0] == '/', "url",
                     "= '" << url << "' must name an absolute path: file:///path/to/dir");
    return make_file_store(path);
  }
  SYMMEM_CHECK_ARG(op, -1, url.rfind(tcp, 0) == 0, "url",
                   "= '" << url << "' is neither tcp://host:port nor file:///path");
  std::string rest = url.substr(tcp.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::string host, port_str;
  if (!rest.empty() && rest[0] == '[') {  // [ipv6]:port
    size_t close = rest.find(']');
    SYMMEM_CHECK_ARG(
        op, -1, close != std::string::npos && close + 1 < rest.size() && rest[close + 1] == ':',
        "url", "= '" << url << "' is not tcp://[ipv6]:port");
    host = rest.substr(1, close - 1);
    port_str = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    SYMMEM_CHECK_ARG(op, -1, colon != std::string::npos, "url",
                     "= '" << url << "' lacks a port: tcp://host:port");
    host = rest.substr(0, colon);
    port_str = rest.substr(colon + 1);
  }
  int port = 0;
  auto [ptr, ec] = std::from_chars(port_str.data(), port_str.data() + port_str.size(), port);
  SYMMEM_CHECK_ARG(op, -1,
                   !host.empty() && ec == std::errc() && ptr == port_str.data() + port_str.size() &&
                       port >= 1 && port <= 65535,
                   "url", "= '" << url << "' needs a host and a port in 1..65535");
  std::string tok = token.empty() ? env::store_token() : token;
  return std::make_shared<TcpStore>(host, static_cast<uint16_t>(port), tok,
                                    detail::resolve_timeout(timeout));
}

}  // namespace symmem
