// The CPU paths' parallel-for: every item exactly once, a body's exception on the caller, and
// as many threads as the work pays for.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "util/parallel.hpp"

namespace gna {
namespace {

TEST(Parallel, EveryItemOnce) {
  for (int threads : {1, 2, 5}) {
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      parallel_for(n, threads, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << i;
    }
  }
}

TEST(Parallel, RethrowsABodysException) {
  EXPECT_THROW(parallel_for(100, 3,
                            [](int64_t begin, int64_t) {
                              if (begin >= 0) throw std::runtime_error("body");
                            }),
               std::runtime_error);
}

TEST(Parallel, ThreadsForTheWork) {
  // Small calls stay on the calling thread; large ones get every thread asked for.
  EXPECT_EQ(threads_for(16, 8, 100), 1);
  EXPECT_EQ(threads_for(1 << 20, 8, 1000), 8);
  // Just enough work for two threads.
  EXPECT_EQ(threads_for(2 * kThreadWork, 8, 1), 2);
  // Never zero, never more than the items.
  EXPECT_EQ(threads_for(0, 8, 1 << 30), 1);
  EXPECT_EQ(threads_for(3, 8, int64_t{1} << 40), 3);
  // 0 asks for one thread per hardware thread.
  EXPECT_EQ(threads_for(int64_t{1} << 30, 0, 1 << 20), default_thread_count());
}

}  // namespace
}  // namespace gna
