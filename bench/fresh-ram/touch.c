/*
 * How fast can this machine give a process memory it has never written?
 *
 * Maps anonymous memory one step at a time and writes one byte per 4 KiB page, so every page
 * is faulted in (the kernel zeroes it; under a hypervisor the host may also have to back it).
 * Prints the rate of each step. A RAM-backed store that keeps every byte it is sent pays this
 * cost once per byte stored, whatever its design, so it bounds any in-memory write benchmark.
 *
 *   cc -O2 -o touch touch.c && ./touch [steps] [step_mib] [--json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 12;
    size_t step_bytes = (size_t)(argc > 2 ? atoi(argv[2]) : 1024) << 20;
    int json = argc > 3 && strcmp(argv[3], "--json") == 0;
    if (steps <= 0 || steps > 64 || step_bytes == 0) {
        fprintf(stderr, "usage: touch [steps 1..64] [step_mib] [--json]\n");
        return 2;
    }
    if (json) printf("{\"step_bytes\": %zu, \"gb_per_s\": [", step_bytes);
    for (int i = 0; i < steps; i++) {
        /* Each step keeps its mapping, so the process grows like a store filling up. */
        char *p = mmap(NULL, step_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        double t0 = now_s();
        for (size_t off = 0; off < step_bytes; off += 4096) p[off] = 1;
        double rate = (double)step_bytes / (now_s() - t0) / 1e9;
        if (json) printf("%s%.3f", i ? ", " : "", rate);
        else printf("step %2d (%5zu MiB in total): %.2f GB/s\n", i + 1, (size_t)(i + 1) * (step_bytes >> 20), rate);
        fflush(stdout);
    }
    if (json) printf("]}\n");
    return 0;
}
