//! The static builds' entry point (issue 39): before musl's `_start`
//! runs, ask the kernel for every page the relocations will write, in one
//! call, and apply the relocations, visiting only the words they name.
//!
//! A static PIE relocates itself (musl's `rcrt1.o`, before anything else
//! runs): ≈ 29 000 pointers in `.data.rel.ro` (panic locations, format
//! strings' pieces, tables of `&str`), ≈ 580 KB, so every one of its ≈ 145
//! pages is written at every start. Written one by one, each is a page
//! fault — on the VMs we measure on ≈ 2.4 µs each, more than all of
//! `hermes --version`'s own instructions. `madvise(MADV_POPULATE_WRITE)`
//! (Linux 5.14) makes the same private copies in one system call, without a
//! trap per page: a static PIE with a table of that size started ≈ 50 µs
//! (≈ 18 %) sooner here (BENCHMARKS.md "Start-up"). The pages and what is
//! written to them are the same; only how they are faulted in changes.
//!
//! The range runs from the image's `PT_GNU_RELRO` segment to the end of
//! its last loaded one (`.data` and `.bss` lie behind it, and even
//! `--version` writes every page of them), found through the image's own
//! ELF header (`__ehdr_start`, which the linker defines): no relocated
//! value may be read before `_start` has run, so this is assembly that
//! uses only PC-relative addresses and the stack. Whatever fails (an older
//! kernel answers `EINVAL`, qemu-user may ignore the advice) changes
//! nothing: the relocation faults the pages in as before. A fixed-address
//! build (`ET_EXEC`) has no relocations and skips the call. The registers
//! `_start` receives are as the kernel left them (zero) except the stack
//! pointer, which is untouched.
//!
//! # Relocated here
//!
//! The relocations are packed (`DT_RELR`): an even entry is the address of
//! one word to relocate, an odd one a bitmap of which of the next 63 words
//! (31 on 32-bit ARM) are. musl's `_start_c` tests the bitmap's bits one at
//! a time, and which are set is close to random, so a good share of its ≈
//! 70,000 tests are mispredicted branches: on x86_64 that walk was 99 % of
//! `hermes --version`'s 422 k instructions and ≈ 50 µs of its CPU (perf,
//! callgrind). Here each set bit is found with one instruction (`bsf`;
//! `rbit` and `clz` on aarch64; on 32-bit ARM, which has no `rbit` before
//! ARMv6T2, `clz` of the lowest set bit alone) and every other bit is
//! skipped: 167 k instructions in all on x86_64. riscv64gc has no such
//! instruction (Zbb is not in it): there the bits are tested one by one
//! as musl does, and what `hermes_start` brings is the one `madvise`. Then the `DT_RELRSZ` entry of the image's own
//! `_DYNAMIC` (writable until `_start` is done, as it always is in a static
//! PIE: nothing makes it read-only) is set to zero, so musl's walk finds
//! nothing left to add. A musl that one day read its relocations some
//! other way would add them twice, and the program would crash at its
//! first pointer: every test that runs the static build (`budgets.sh`,
//! the packages' checks, the qemu runs) would fail at once.
//!
//! `build.rs` makes `hermes_start` the entry of the musl builds of these
//! four architectures (`-e hermes_start`: x86_64, aarch64, 32-bit ARM —
//! armv7 and armv6 alike — and riscv64); the glibc builds are relocated by
//! `ld.so`, before any code of ours could run. Each architecture's code is
//! its own file, the same steps in the same order with the same labels.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "arm")]
mod arm;
#[cfg(target_arch = "riscv64")]
mod riscv64;
#[cfg(target_arch = "x86_64")]
mod x86_64;
