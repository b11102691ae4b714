/* The plain memory read rate of this machine now: THREADS threads (argv[2], default 2) each read
 * its share of an anonymous region of argv[1] GiB (default 1) three times, one 64-byte line a
 * step, no software prefetch; prints the best pass in GB/s.
 *
 * Why: on a shared VM the host's memory rate moves between levels from minute to minute (on the
 * 2-core EPYC of session 41: ~32 and ~56-60 GB/s, switching even inside one process), and a
 * memory-bound decode moves with it. bench/cpu_vs_llamacpp.sh runs this before and after each
 * round so that a table's rounds can be read against the rate they ran at.
 *
 *   cc -O2 -pthread bench/membw.c -o membw && ./membw 1 2
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

/* Passes over the region (the best counts: the first may meet cold TLBs). */
#define PASSES 3
#define MAX_THREADS 64

static const uint64_t *region;
/* Where the sums end up, so that the reads are not optimised away. */
static volatile uint64_t sink;

struct share {
  size_t from, to; /* in 8-byte words */
  uint64_t sum;
};

static void *read_share(void *arg) {
  struct share *s = arg;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  /* One 64-byte line a step, four independent sums. */
  for (size_t i = s->from; i + 8 <= s->to; i += 8) {
    a += region[i];
    b += region[i + 2];
    c += region[i + 4];
    d += region[i + 6];
  }
  s->sum = a + b + c + d;
  return NULL;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  double gib = argc > 1 ? atof(argv[1]) : 1.0;
  int threads = argc > 2 ? atoi(argv[2]) : 2;
  if (gib <= 0 || threads < 1 || threads > MAX_THREADS) {
    fprintf(stderr, "usage: membw [GiB > 0] [threads 1-%d]\n", MAX_THREADS);
    return 2;
  }
  size_t bytes = (size_t)(gib * (1 << 30)) / 4096 * 4096;
  uint64_t *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    perror("membw: mmap");
    return 1;
  }
#ifdef MADV_HUGEPAGE
  madvise(map, bytes, MADV_HUGEPAGE); /* as flashlane's resident weights ask */
#endif
  for (size_t i = 0; i < bytes / 8; i += 512) map[i] = i; /* touch every page */
  region = map;
  size_t words = bytes / 8, per = words / threads / 8 * 8;
  double best = 0;
  uint64_t total = 0;
  for (int pass = 0; pass < PASSES; pass++) {
    pthread_t tid[MAX_THREADS];
    struct share share[MAX_THREADS];
    double t0 = seconds();
    for (int t = 0; t < threads; t++) {
      share[t] = (struct share){t * per, t == threads - 1 ? words : (t + 1) * per, 0};
      pthread_create(&tid[t], NULL, read_share, &share[t]);
    }
    for (int t = 0; t < threads; t++) {
      pthread_join(tid[t], NULL);
      total += share[t].sum;
    }
    double rate = bytes / (seconds() - t0) / 1e9;
    if (rate > best) best = rate;
  }
  sink = total;
  printf("%.1f\n", best);
  return 0;
}
