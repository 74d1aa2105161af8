// A minimal NVTX injection library for test_nvtx (NOTE [nvtx ranges] in src/core/trace.hpp):
// loaded by NVTX through NVTX_INJECTION64_PATH, it takes over the domain functions of NVTX's
// core2 module and appends one line per event to $SYMMEM_NVTX_LOG:
//   domain <name>            (nvtxDomainCreateA)
//   push <domain> <payload> <message>
//   pop <domain>
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex g_mu;
std::vector<std::string>* g_domains = new std::vector<std::string>;  // handle = index + 1
FILE* g_log = nullptr;

const char* domain_name(nvtxDomainHandle_t d) {
  const size_t i = reinterpret_cast<size_t>(d);
  return i >= 1 && i <= g_domains->size() ? (*g_domains)[i - 1].c_str() : "(default)";
}

void log_line(const std::string& line) {
  if (g_log == nullptr) return;
  std::fprintf(g_log, "%s\n", line.c_str());
  std::fflush(g_log);
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_domains->push_back(name ? name : "");
  log_line(std::string("domain ") + (name ? name : ""));
  return reinterpret_cast<nvtxDomainHandle_t>(g_domains->size());
}

int NVTX_API range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string msg = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii
                        ? a->message.ascii
                        : "(not ascii)";
  unsigned long long payload =
      a && a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 ? a->payload.ullValue : 0;
  log_line(std::string("push ") + domain_name(d) + " " + std::to_string(payload) + " " + msg);
  return 0;
}

int NVTX_API range_pop(nvtxDomainHandle_t d) {
  std::lock_guard<std::mutex> lock(g_mu);
  log_line(std::string("pop ") + domain_name(d));
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const char* path = std::getenv("SYMMEM_NVTX_LOG");
  if (path != nullptr) g_log = std::fopen(path, "a");
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (cb == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || table == nullptr)
    return 0;
  auto set = [&](unsigned id, NvtxFunctionPointer f) {
    if (id < size && table[id] != nullptr) *table[id] = f;
  };
  set(NVTX_CBID_CORE2_DomainCreateA, reinterpret_cast<NvtxFunctionPointer>(&domain_create));
  set(NVTX_CBID_CORE2_DomainRangePushEx, reinterpret_cast<NvtxFunctionPointer>(&range_push));
  set(NVTX_CBID_CORE2_DomainRangePop, reinterpret_cast<NvtxFunctionPointer>(&range_pop));
  log_line("init");
  return 1;  // success
}
