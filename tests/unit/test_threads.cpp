// startable_threads: as many workers as asked when they can start, as many as could
// under an address-space limit (where libgomp would end the process instead).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "posenc/threads.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define POSENC_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POSENC_TEST_ASAN 1
#endif
#endif

namespace posenc {
namespace {

TEST(StartableThreads, AllWhenTheyCanStart) {
  EXPECT_EQ(startable_threads(1), 1);
  EXPECT_EQ(startable_threads(8), 8);
  EXPECT_EQ(startable_threads(0), 1);  // clamped to 1..kMaxThreads
}

TEST(StartableThreads, FewerUnderAnAddressSpaceLimit) {
#ifdef POSENC_TEST_ASAN
  GTEST_SKIP() << "SKIP: address-space limits mean nothing under AddressSanitizer";
#endif
  // In a child: 64 more MiB of address space than it uses, so that 8 MiB stacks run out
  // after a few threads.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t cap = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGE_SIZE) + (rlim_t{64} << 20);
    rlimit as{cap, cap}, stack{8 << 20, 8 << 20};
    ::setrlimit(RLIMIT_STACK, &stack);
    ::setrlimit(RLIMIT_AS, &as);
    const int n = startable_threads(600);
    ::_exit(n >= 1 && n < 600 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace posenc
