#include "cuda/peer_tables.hpp"

#include "cuda/cuda_check.hpp"
#include "cuda/timeout_record.hpp"

namespace symmem::cuda {

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  if (previous_ != device) {
    SYMMEM_CUDART_CHECK("set device", -1, cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_ && previous_ >= 0) SYMMEM_CUDART_WARN(cudaSetDevice(previous_));
}

namespace {

// Relaxes this thread's stream-capture mode for the scope (cudaMalloc and friends are then
// allowed while another stream captures).
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

PeerTables::PeerTables(int device, int rank, std::vector<void*> buffers,
                       std::vector<uint32_t*> pads)
    : device_(device), rank_(rank), buffers_(std::move(buffers)), pads_(std::move(pads)) {
  DeviceGuard guard(device_);
  RelaxedCapture relaxed;
  SYMMEM_CUDART_CHECK("peer tables", rank_,
                      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    buffers_dev_ = upload(buffers_);
    std::vector<void*> p(pads_.begin(), pads_.end());
    pads_dev_ = reinterpret_cast<uint32_t**>(upload(p));
  } catch (...) {
    if (buffers_dev_) cudaFree(buffers_dev_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

PeerTables::~PeerTables() {
  try {
    DeviceGuard guard(device_);
    RelaxedCapture relaxed;
    for (auto& [offset, table] : views_) SYMMEM_CUDART_WARN(cudaFree(table));
    if (buffers_dev_) SYMMEM_CUDART_WARN(cudaFree(buffers_dev_));
    if (pads_dev_) SYMMEM_CUDART_WARN(cudaFree(pads_dev_));
    if (stream_) SYMMEM_CUDART_WARN(cudaStreamDestroy(stream_));
  } catch (...) {
  }
}

void** PeerTables::upload(const std::vector<void*>& host) const {
  void** dev = nullptr;
  const size_t bytes = sizeof(void*) * (host.empty() ? 1 : host.size());
  SYMMEM_CUDART_CHECK("peer tables", rank_, cudaMalloc(reinterpret_cast<void**>(&dev), bytes));
  cudaError_t e = cudaMemcpyAsync(dev, host.data(), sizeof(void*) * host.size(),
                                  cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    cudaFree(dev);
    throw_cudart_error("peer tables", rank_, "cudaMemcpyAsync(table)", e, SYMMEM_WHERE);
  }
  return dev;
}

void* const* PeerTables::view_buffers_device(size_t offset) const {
  if (offset == 0) return buffers_dev_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = views_.find(offset);
  if (it != views_.end()) return it->second;
  std::vector<void*> host(buffers_.size());
  for (size_t p = 0; p < buffers_.size(); ++p) {
    host[p] = buffers_[p] ? static_cast<char*>(buffers_[p]) + offset : nullptr;
  }
  DeviceGuard guard(device_);
  RelaxedCapture relaxed;
  void** table = upload(host);
  views_.emplace(offset, table);
  return table;
}

DeviceHandle PeerTables::handle(size_t offset, size_t length, size_t pad_bytes) const {
  DeviceHandle h;
  h.rank = rank_;
  h.world_size = world_size();
  h.size = length;
  h.pad_slots = static_cast<uint32_t>(pad_bytes / sizeof(uint32_t));
  h.num_channels = h.pad_slots / static_cast<uint32_t>(world_size());
  h.buffers = offset == 0 ? buffers_device() : view_buffers_device(offset);
  h.signal_pads = pads_device();
  h.timeout_record = timeout_record();
  h.timeout_ns = timeout_to_ns(kDefaultTimeout);  // SYMMEM_TIMEOUT_MS
  return h;
}

}  // namespace symmem::cuda
