// SymmetricMemory core + host backend, ranks as threads of one process over a HashStore.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/memory_impl.hpp"
#include "core/memory_registry.hpp"
#include "core/workspace.hpp"
#include "host_test_util.hpp"
#include "symmem/backend.hpp"
#include "symmem/env.hpp"
#include "symmem/memory.hpp"
#include "test_util.hpp"

namespace symmem::test {
namespace {

TEST(HostMemory, PeerWritesVisibleAfterBarrier) {
  for (int n : {1, 2, 4}) {
    auto errors = run_ranks(n, [n](Group& g) {
      auto buf = allocate(g, 4096);
      EXPECT_EQ(buf.backend(), "host");
      EXPECT_EQ(buf.world_size(), n);
      EXPECT_EQ(buf.size(), 4096u);
      for (int round = 0; round < 20; ++round) {
        // Each rank writes its mark into slot `rank` of every peer's buffer.
        for (int p = 0; p < n; ++p) {
          static_cast<int*>(buf.ptr(p))[g.rank()] = round * 100 + g.rank();
        }
        buf.barrier();
        for (int src = 0; src < n; ++src) {
          ASSERT_EQ(static_cast<int*>(buf.ptr(g.rank()))[src], round * 100 + src)
              << "round " << round << " rank " << g.rank() << " src " << src;
        }
        buf.barrier(1);
      }
      EXPECT_EQ(buf.ptrs_device(), nullptr);
      for (int p = 0; p < n; ++p) EXPECT_TRUE(buf.direct_access(p));
    });
    expect_no_errors(errors);
  }
}

TEST(HostMemory, PutWaitSignalsManyRoundsAndChannels) {
  const int n = 3;
  auto errors = run_ranks(n, [](Group& g) {
    auto buf = allocate(g, 1 << 16, Device::cpu(), AllocOptions{"", 1024});
    int r = g.rank(), w = g.world_size();
    ASSERT_EQ(buf.num_channels(), 1024 / 4 / w);
    const int kRounds = 300;
    int* mine = static_cast<int*>(buf.ptr(r));
    for (int round = 0; round < kRounds; ++round) {
      int ch = round % buf.num_channels();
      int dst = (r + 1) % w, src = (r + w - 1) % w;
      // Ring: write into the next rank's buffer, signal it, wait for the previous rank.
      static_cast<int*>(buf.ptr(dst))[ch] = round * 7 + r;
      buf.put_signal(dst, ch);
      buf.wait_signal(src, ch);
      ASSERT_EQ(mine[ch], round * 7 + src) << "round " << round;
    }
    // Pads are zero at rest.
    buf.barrier();
    uint32_t* pad = buf.signal_pad(r);
    for (size_t i = 0; i < buf.signal_pad_bytes() / 4; ++i) ASSERT_EQ(pad[i], 0u) << "slot " << i;
  });
  expect_no_errors(errors);
}

TEST(HostMemory, ViewsAndFree) {
  auto errors = run_ranks(2, [](Group& g) {
    auto buf = allocate(g, 8192);
    auto v = buf.view(1024, 2048);
    EXPECT_EQ(v.size(), 2048u);
    EXPECT_EQ(v.offset(), 1024u);
    EXPECT_EQ(static_cast<char*>(v.ptr(1)), static_cast<char*>(buf.ptr(1)) + 1024);
    auto vv = v.view(1000, 48);
    EXPECT_EQ(vv.offset(), 2024u);
    expect_error([&] { v.view(2000, 49); }, ErrorCode::InvalidArgument, {"offset", "2048"});
    expect_error([&] { v.view(0, 0); }, ErrorCode::InvalidArgument, {"length"});
    expect_error([&] { buf.ptr(2); }, ErrorCode::InvalidArgument, {"peer", "[0, 2)"});
    expect_error([&] { buf.barrier(buf.num_channels()); }, ErrorCode::InvalidArgument,
                 {"channel", "out of range [0, "});
    expect_error([&] { buf.put_signal(-1); }, ErrorCode::InvalidArgument, {"dst", "[0, 2)"});
    expect_error([&] { buf.wait_signal(5, 0); }, ErrorCode::InvalidArgument, {"src", "[0, 2)"});
    EXPECT_EQ(buf.global_rank(1), 1);
    g.store_barrier();
    EXPECT_FALSE(buf.freed());
    buf.free();
    for (auto* h : {&buf, &v, &vv}) {
      EXPECT_TRUE(h->freed());
      EXPECT_TRUE(h->valid());  // still a handle: its metadata stays readable
      expect_error([&] { h->ptr(0); }, ErrorCode::InvalidArgument,
                   {"freed", "allocation #0 of group"});
      expect_error([&] { h->barrier(); }, ErrorCode::InvalidArgument, {"freed"});
      expect_error([&] { h->view(0, 1); }, ErrorCode::InvalidArgument, {"freed"});
    }
    expect_error([&] { buf.free(); }, ErrorCode::InvalidArgument, {"already freed"});
    EXPECT_EQ(buf.size(), 8192u);  // metadata stays readable
    SymmetricMemory empty;
    EXPECT_FALSE(empty.freed());
    expect_error([&] { empty.ptr(0); }, ErrorCode::InvalidArgument, {"empty"});
  });
  expect_no_errors(errors);
}

TEST(HostMemory, MismatchedSizesFailOnEveryRank) {
  const int n = 3;
  auto errors = run_ranks(n, [](Group& g) {
    try {
      allocate(g, 4096 * (g.rank() == 1 ? 2 : 1));
    } catch (...) {
      // The group stays usable: the next agreeing allocation works.
      auto ok = allocate(g, 64);
      ok.barrier();
      throw;
    }
  });
  for (int r = 0; r < n; ++r) {
    expect_rank_error(errors, r, ErrorCode::InvalidArgument,
                      {"rank " + std::to_string(r), "disagree", "bytes", "rank 0 #0: 4096 bytes",
                       "rank 1 #0: 8192 bytes"});
  }
}

TEST(HostMemory, MismatchedOrderFailsOnEveryRank) {
  auto errors = run_ranks(2, [](Group& g) {
    size_t a = 1024, b = 2048;
    if (g.rank() == 1) std::swap(a, b);
    allocate(g, a);
    allocate(g, b);
  });
  for (int r = 0; r < 2; ++r) {
    expect_rank_error(errors, r, ErrorCode::InvalidArgument, {"disagree", "#0: 1024", "#0: 2048"});
  }
}

TEST(HostMemory, BadArgumentOnOneRankFailsAllWithoutHanging) {
  auto errors = run_ranks(3, [](Group& g) { allocate(g, g.rank() == 2 ? 0 : 4096); });
  expect_rank_error(errors, 2, ErrorCode::InvalidArgument, {"rank 2", "'bytes'", "= 0"});
  expect_rank_error(errors, 0, ErrorCode::InvalidArgument, {"rank 0", "rank 2", "failed"});
  expect_rank_error(errors, 1, ErrorCode::InvalidArgument, {"rank 1", "rank 2", "failed"});

  errors = run_ranks(2, [](Group& g) { allocate(g, 4096, Device::cpu(), AllocOptions{"", 6}); });
  expect_rank_error(errors, 0, ErrorCode::InvalidArgument, {"signal_pad_bytes", "multiple of 4"});

  errors = run_ranks(4, [](Group& g) { allocate(g, 4096, Device::cpu(), AllocOptions{"", 8}); });
  expect_rank_error(errors, 3, ErrorCode::InvalidArgument,
                    {"rank 3", "signal_pad_bytes", "fewer than the 4"});
}

TEST(HostMemory, TimeoutNamesRankPeerAndChannel) {
  auto errors = run_ranks(2, [](Group& g) {
    auto buf = allocate(g, 4096);
    if (g.rank() == 0) {
      auto t0 = std::chrono::steady_clock::now();
      expect_error([&] { buf.wait_signal(1, 3, Millis(200)); }, ErrorCode::Timeout,
                   {"wait_signal", "rank 0", "channel 3", "rank 1 to signal", "200 ms"});
      auto ms = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GE(ms, 190);
      EXPECT_LT(ms, 2000);
      expect_error([&] { buf.barrier(2, Millis(100)); }, ErrorCode::Timeout,
                   {"barrier", "rank 0", "channel 2", "rank 1"});
    }
    g.store_barrier();
  });
  expect_no_errors(errors);
}

TEST(HostMemory, PutSignalWaitsForConsumption) {
  auto errors = run_ranks(2, [](Group& g) {
    auto buf = allocate(g, 4096);
    if (g.rank() == 0) {
      buf.put_signal(1, 0);
      expect_error([&] { buf.put_signal(1, 0, Millis(100)); }, ErrorCode::Timeout,
                   {"put_signal", "rank 1 to consume", "channel 0"});
    }
    g.store_barrier();
    if (g.rank() == 1) buf.wait_signal(0, 0);
    g.store_barrier();
  });
  expect_no_errors(errors);
}

TEST(HostMemory, FindSymmetricAndWorkspace) {
  auto errors = run_ranks(2, [](Group& g) {
    auto buf = allocate(g, 1 << 16);
    char* mine = static_cast<char*>(buf.ptr(g.rank()));
    auto v = find_symmetric(g, mine + 100, 50);
    ASSERT_TRUE(v.valid());
    EXPECT_EQ(v.offset(), 100u);
    EXPECT_EQ(v.size(), 50u);
    EXPECT_EQ(v.alloc_id(), buf.alloc_id());
    EXPECT_FALSE(find_symmetric(g, mine + (1 << 16) - 10, 11).valid());  // runs past the end
    int local = 0;
    EXPECT_FALSE(find_symmetric(g, &local, 4).valid());
    BufferCache cache;  // NOTE [op fast path]: asked twice, answered from the cache the second time
    for (int i = 0; i < 2; ++i) {
      BufferRef r = cache.find(mine + 5);
      ASSERT_TRUE(r.alloc) << i;
      EXPECT_EQ(r.offset, 5u);
      EXPECT_EQ(r.alloc->alloc_id, buf.alloc_id());
      EXPECT_FALSE(cache.find(&local).alloc) << i;
    }
    EXPECT_NE(describe(v).find("allocation #0"), std::string::npos) << describe(v);

    auto ws = group_workspace(g, Device::cpu(), 1000);
    EXPECT_GE(ws.size(), 1000u);
    auto ws2 = group_workspace(g, Device::cpu(), 500);
    EXPECT_EQ(ws2.alloc_id(), ws.alloc_id());
    auto ws3 = group_workspace(g, Device::cpu(), 3 << 20);
    EXPECT_GE(ws3.size(), size_t{3} << 20);
    EXPECT_NE(ws3.alloc_id(), ws.alloc_id());
    ws3.barrier();

    buf.free();
    EXPECT_FALSE(find_symmetric(g, mine + 100, 50).valid());
    EXPECT_FALSE(cache.find(mine + 5).alloc);  // freed: the cache does not answer from memory
    auto again = allocate(g, 1 << 16);  // may reuse the address: the cache must see the new one
    char* again_mine = static_cast<char*>(again.ptr(g.rank()));
    BufferRef r = cache.find(again_mine + 5);
    ASSERT_TRUE(r.alloc);
    EXPECT_EQ(r.alloc->alloc_id, again.alloc_id());
  });
  expect_no_errors(errors);
}

TEST(HostMemory, SubgroupsAndOverlappingSubgroups) {
  const int n = 4;
  auto errors = run_ranks(n, [](Group& g) {
    int r = g.rank();
    // Overlapping subgroups {0,1,2} and {1,2,3}; ranks 1 and 2 are in both.
    std::vector<Group> subs;
    if (r <= 2) subs.push_back(g.split({0, 1, 2}));
    if (r >= 1) subs.push_back(g.split({1, 2, 3}));
    std::vector<SymmetricMemory> bufs;
    for (auto& s : subs) bufs.push_back(allocate(s, 4096));
    for (size_t i = 0; i < subs.size(); ++i) {
      auto& s = subs[i];
      auto& b = bufs[i];
      ASSERT_EQ(b.world_size(), 3);
      for (int p = 0; p < 3; ++p) static_cast<int*>(b.ptr(p))[s.rank()] = s.global_rank(s.rank());
      b.barrier();
      int* mine = static_cast<int*>(b.ptr(s.rank()));
      for (int p = 0; p < 3; ++p) {
        EXPECT_EQ(mine[p], b.global_rank(p));
        EXPECT_EQ(b.global_rank(p), s.global_rank(p));
      }
    }
    if (r == 0) {
      EXPECT_EQ(bufs[0].global_rank(2), 2);
    }
    if (r == 3) {
      EXPECT_EQ(bufs[0].global_rank(0), 1);
    }
    // A buffer of the subgroup is not symmetric memory of the parent group.
    EXPECT_FALSE(find_symmetric(g, bufs[0].ptr(bufs[0].rank()), 4).valid());
    EXPECT_TRUE(find_symmetric(subs[0], bufs[0].ptr(bufs[0].rank()), 4).valid());
  });
  expect_no_errors(errors);
}

TEST(HostMemory, UnavailableBackendListsAvailableOnes) {
  auto errors = run_ranks(2, [](Group& g) {
    allocate(g, 4096, Device::cpu(), AllocOptions{"nosuchbackend", 0});
  });
  for (int r = 0; r < 2; ++r) {
    expect_rank_error(errors, r, ErrorCode::BackendUnavailable,
                      {"nosuchbackend", "libsymmem_nosuchbackend.so", "available backends: host"});
  }
  expect_error([] { get_backend("nosuchbackend"); }, ErrorCode::BackendUnavailable,
               {"nosuchbackend", "available backends: host"});
  // A plugin that cannot serve the device: Unsupported with its reason, on every rank.
  errors = run_ranks(2, [](Group& g) {
    allocate(g, 4096, Device::cpu(), AllocOptions{"testplugin", 0});
  });
  for (int r = 0; r < 2; ++r) {
    expect_rank_error(errors, r, ErrorCode::Unsupported, {"testplugin", "serves nothing"});
  }
  // GPU memory on the host backend.
  errors = run_ranks(1, [](Group& g) {
    allocate(g, 4096, Device::cuda(0), AllocOptions{"host", 0});
  });
  expect_rank_error(errors, 0, ErrorCode::Unsupported, {"host", "CPU memory only", "cuda"});
}

TEST(HostMemory, HostBackendRefusesSeveralHosts) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      try {
        GroupOptions o;
        o.host_id = r == 0 ? "hostA" : "hostB";
        o.timeout = Millis(20000);
        Group g = Group::create(store, r, 2, o);
        allocate(g, 4096);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    expect_rank_error(errors, r, ErrorCode::Unsupported, {"one host", "nvshmem", "nccl"});
  }
}

TEST(Registry, PluginsLoadOrSayWhy) {
  ASSERT_NE(env::get_string("SYMMEM_PLUGIN_PATH"), "") << "the test sets SYMMEM_PLUGIN_PATH";
  auto b = get_backend("testplugin");
  ASSERT_TRUE(b);
  EXPECT_STREQ(b->name(), "testplugin");
  EXPECT_EQ(get_backend("testplugin"), b);  // loaded once
  expect_error([] { get_backend("needsdep"); }, ErrorCode::BackendUnavailable,
               {"libsymmem_needsdep.so", "libsymmem_testdep.so", "available backends: host"});
  const std::string needs = "needs " + std::to_string(kPluginAbiVersion);
  expect_error([] { get_backend("badabi"); }, ErrorCode::BackendUnavailable,
               {"ABI version 999", needs.c_str()});
  expect_error([] { get_backend("garbage"); }, ErrorCode::BackendUnavailable,
               {"cannot load", "libsymmem_garbage.so"});
  auto avail = available_backends();
  ASSERT_FALSE(avail.empty());
  EXPECT_EQ(avail[0], "host");
  EXPECT_NE(std::find(avail.begin(), avail.end(), "testplugin"), avail.end());
  EXPECT_EQ(std::find(avail.begin(), avail.end(), "badabi"), avail.end());
  EXPECT_TRUE(get_backend("host")->supports(OpKind::all_reduce, DType::bf16, DeviceType::cpu));
  EXPECT_TRUE(get_backend("host")->supports(OpKind::all_to_all_v, DType::i64, DeviceType::cpu));
  EXPECT_FALSE(get_backend("host")->supports(OpKind::all_reduce, DType::f32, DeviceType::cuda));
  auto plugin = get_backend("testplugin");  // its rule: CPU barriers
  EXPECT_TRUE(plugin->serves(DeviceType::cpu));
  EXPECT_FALSE(plugin->serves(DeviceType::cuda));
  EXPECT_TRUE(plugin->supports(OpKind::barrier, DType::f32, DeviceType::cpu));
  EXPECT_FALSE(plugin->supports(OpKind::all_reduce, DType::f32, DeviceType::cpu));
  EXPECT_STREQ(to_string(OpKind::reduce_scatter), "reduce_scatter");
}

TEST(Registry, SelectionIsFixedAfterTheFirstAllocation) {
  auto errors = run_ranks(1, [](Group& g) {
    std::string why;
    EXPECT_EQ(resolve_backend(g, Device::cpu(), &why), "host");
    EXPECT_NE(why.find("CPU"), std::string::npos) << why;
    EXPECT_EQ(resolve_backend(g, Device::cuda(0), &why), "cuda");
    allocate(g, 64);
    select_backend("auto");  // unchanged: fine
    expect_error([] { select_backend("nccl"); }, ErrorCode::InvalidArgument,
                 {"already 'auto'", "before the first allocation"});
    expect_error([] { select_backend("Bad Name!"); }, ErrorCode::InvalidArgument, {"name"});
  });
  expect_no_errors(errors);
}

// Opens another rank's memfd the way a peer holds it (through /proc/self/map_files) and tries to
// shrink and grow it: the seals must refuse both.
TEST(HostSecurity, MemfdCannotBeResized) {
  std::string skip;
  auto errors = run_ranks(2, [&skip](Group& g) {
    auto buf = allocate(g, 1 << 20);
    // Rank 0 attacks rank 1's buffer; both meet at the barrier whatever happens.
    auto attack = [&] {
      auto peer = reinterpret_cast<uintptr_t>(buf.ptr(1));
      std::ifstream maps("/proc/self/maps");
      std::string line, range;
      while (std::getline(maps, line)) {
        uintptr_t lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo == peer) {
          range = line.substr(0, line.find(' '));
          EXPECT_NE(line.find("memfd:symmem:"), std::string::npos) << line;
        }
      }
      int fd = range.empty()
                   ? -1
                   : ::open(("/proc/self/map_files/" + range).c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) {
        skip =
            "cannot open the peer's memfd through /proc/self/map_files (needs CAP_SYS_ADMIN; "
            "not under valgrind): " +
            std::string(std::strerror(errno));
        return;
      }
      EXPECT_EQ(::ftruncate(fd, 0), -1);
      EXPECT_EQ(errno, EPERM);
      EXPECT_EQ(::ftruncate(fd, 1 << 30), -1);
      EXPECT_EQ(errno, EPERM);
      EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);  // the seals are sealed
      ::close(fd);
    };
    if (g.rank() == 0) attack();
    g.store_barrier();
  });
  expect_no_errors(errors);
  if (!skip.empty()) GTEST_SKIP() << skip;
}

TEST(HostMemory, FreeingLeavesNoMappings) {
  auto count_memfds = [] {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    int n = 0;
    while (std::getline(maps, line)) n += line.find("memfd:symmem:") != std::string::npos;
    return n;
  };
  // Any allocation first drops the state (and workspaces) of groups of earlier tests.
  expect_no_errors(run_ranks(1, [](Group& g) { allocate(g, 64); }));
  int before = count_memfds();
  auto errors = run_ranks(3, [](Group& g) {
    for (int i = 0; i < 20; ++i) {
      auto b = allocate(g, 4096 * (i + 1));
      b.barrier();
      if (i % 2) b.free();
    }
  });
  expect_no_errors(errors);
  EXPECT_EQ(count_memfds(), before);
}

}  // namespace
}  // namespace symmem::test
