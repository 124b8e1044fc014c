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
//! are. musl's `_start_c` tests the bitmap's bits one at a time, and which
//! are set is close to random, so a good share of its ≈ 70,000 tests are
//! mispredicted branches: on x86_64 that walk was 99 % of `hermes
//! --version`'s 422 k instructions and ≈ 50 µs of its CPU (perf,
//! callgrind). Here each set bit is found with one instruction (`bsf`;
//! `rbit` and `clz` on aarch64) and every other bit is skipped: 167 k
//! instructions in all. Then the `DT_RELRSZ` entry of the image's own
//! `_DYNAMIC` (writable until `_start` is done, as it always is in a static
//! PIE: nothing makes it read-only) is set to zero, so musl's walk finds
//! nothing left to add. A musl that one day read its relocations some
//! other way would add them twice, and the program would crash at its
//! first pointer: every test that runs the static build (`budgets.sh`,
//! the packages' checks, the qemu runs) would fail at once.
//!
//! `build.rs` makes `hermes_start` the entry of the musl builds of these
//! two architectures (`-e hermes_start`); the glibc builds are relocated
//! by `ld.so`, before any code of ours could run.

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".text",
    ".globl hermes_start",
    ".type hermes_start, @function",
    ".p2align 4",
    "hermes_start:",
    // rdi: the ELF header; only an ET_DYN image is relocated.
    "lea rdi, [rip + __ehdr_start]",
    "cmp word ptr [rdi + 16], 3",
    "jne 9f",
    // rsi: the program headers (e_phoff), ecx: how many (e_phnum);
    // r8: PT_GNU_RELRO's p_vaddr, r9: the end of the last PT_LOAD.
    "mov rsi, qword ptr [rdi + 32]",
    "add rsi, rdi",
    "movzx ecx, word ptr [rdi + 56]",
    "xor r8d, r8d",
    "xor r9d, r9d",
    "2:",
    "test ecx, ecx",
    "jz 5f",
    "mov eax, dword ptr [rsi]",
    "cmp eax, 0x6474e552", // PT_GNU_RELRO
    "jne 6f",
    "mov r8, qword ptr [rsi + 16]",
    "6:",
    "cmp eax, 1", // PT_LOAD
    "jne 7f",
    "mov rax, qword ptr [rsi + 16]",
    "add rax, qword ptr [rsi + 40]",
    "cmp rax, r9",
    "cmova r9, rax",
    "7:",
    "add rsi, 56",
    "dec ecx",
    "jmp 2b",
    "5:",
    "test r8, r8",
    "jz 3f",
    "cmp r9, r8",
    "jbe 3f",
    // madvise(base + relro rounded down to its page, up to base + end,
    // MADV_POPULATE_WRITE); x86_64 pages are 4 KiB.
    "add r8, rdi",
    "add r9, rdi",
    "mov rdi, r8",
    "and rdi, -4096",
    "mov rsi, r9",
    "sub rsi, rdi",
    "mov edx, 23",
    "mov eax, 28",
    "syscall",
    "3:",
    // The relocations (see "Relocated here"). rdi: the image's base.
    "lea rdi, [rip + __ehdr_start]",
    // r8: DT_RELR's value, r9: DT_RELRSZ's, r11: where the latter is.
    "lea r10, [rip + _DYNAMIC]",
    "xor r8d, r8d",
    "xor r9d, r9d",
    "xor r11d, r11d",
    "20:",
    "mov rax, qword ptr [r10]",
    "test rax, rax",
    "jz 21f",
    "cmp rax, 36", // DT_RELR
    "jne 22f",
    "mov r8, qword ptr [r10 + 8]",
    "22:",
    "cmp rax, 35", // DT_RELRSZ
    "jne 23f",
    "mov r9, qword ptr [r10 + 8]",
    "lea r11, [r10 + 8]",
    "23:",
    "add r10, 16",
    "jmp 20b",
    "21:",
    "test r8, r8",
    "jz 9f",
    "test r9, r9",
    "jz 9f",
    // r8: the next entry, r9: the table's end, rsi: the word that bit 1
    // of a bitmap entry stands for.
    "add r8, rdi",
    "add r9, r8",
    "xor esi, esi",
    "24:",
    "cmp r8, r9",
    "jae 25f",
    "mov rax, qword ptr [r8]",
    "add r8, 8",
    "test al, 1",
    "jnz 26f",
    // An address (even): that word, and bitmaps continue after it.
    "lea rsi, [rdi + rax]",
    "add qword ptr [rsi], rdi",
    "add rsi, 8",
    "jmp 24b",
    "26:",
    // A bitmap (odd): bit k + 1 set relocates word k after rsi. Only the
    // set bits are visited, lowest first (`bsf` of a non-zero word).
    "shr rax, 1",
    "jz 28f",
    "27:",
    "bsf rcx, rax",
    "add qword ptr [rsi + 8*rcx], rdi",
    "lea rdx, [rax - 1]",
    "and rax, rdx",
    "jnz 27b",
    "28:",
    "add rsi, 504", // 63 words
    "jmp 24b",
    "25:",
    // Done: musl's `_start` must find nothing left to add.
    "mov qword ptr [r11], 0",
    "9:",
    "xor eax, eax",
    "xor ecx, ecx",
    "xor edx, edx",
    "xor esi, esi",
    "xor edi, edi",
    "xor r8d, r8d",
    "xor r9d, r9d",
    "xor r10d, r10d",
    "xor r11d, r11d",
    "jmp _start",
    ".size hermes_start, . - hermes_start",
);

#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".text",
    ".globl hermes_start",
    ".type hermes_start, %function",
    ".p2align 2",
    "hermes_start:",
    // The page size (4, 16 or 64 KiB kernels) from the auxiliary vector,
    // past argc, argv[] and envp[] on the stack: x11 = AT_PAGESZ - 1.
    "mov x9, sp",
    "ldr x10, [x9]",
    "add x9, x9, x10, lsl #3",
    "add x9, x9, #16",
    "2:",
    "ldr x10, [x9], #8",
    "cbnz x10, 2b",
    "3:",
    "ldp x10, x11, [x9], #16",
    "cbz x10, 30f", // AT_NULL: no page size, no advice
    "cmp x10, #6",  // AT_PAGESZ
    "b.ne 3b",
    "sub x11, x11, #1",
    // x9: the ELF header; only an ET_DYN image is relocated.
    "adrp x9, __ehdr_start",
    "add x9, x9, :lo12:__ehdr_start",
    "ldrh w10, [x9, #16]",
    "cmp w10, #3",
    "b.ne 9f",
    // x12: the program headers (e_phoff), w13: how many (e_phnum);
    // x15: PT_GNU_RELRO's p_vaddr, x16: the end of the last PT_LOAD.
    "ldr x12, [x9, #32]",
    "add x12, x12, x9",
    "ldrh w13, [x9, #56]",
    "movz w14, #0xe552",
    "movk w14, #0x6474, lsl #16", // PT_GNU_RELRO
    "mov x15, #0",
    "mov x16, #0",
    "4:",
    "cbz w13, 5f",
    "ldr w10, [x12]",
    "cmp w10, w14",
    "b.ne 6f",
    "ldr x15, [x12, #16]",
    "6:",
    "cmp w10, #1", // PT_LOAD
    "b.ne 7f",
    "ldr x10, [x12, #16]",
    "ldr x17, [x12, #40]",
    "add x10, x10, x17",
    "cmp x10, x16",
    "csel x16, x10, x16, hi",
    "7:",
    "add x12, x12, #56",
    "sub w13, w13, #1",
    "b 4b",
    "5:",
    "cbz x15, 30f",
    "cmp x16, x15",
    "b.ls 30f",
    // madvise(base + relro rounded down to its page, up to base + end,
    // MADV_POPULATE_WRITE).
    "add x15, x15, x9",
    "add x16, x16, x9",
    "bic x0, x15, x11",
    "sub x1, x16, x0",
    "mov x2, #23",
    "mov x8, #233",
    "svc #0",
    "30:",
    // The relocations (see "Relocated here"). x9: the image's base.
    "adrp x9, __ehdr_start",
    "add x9, x9, :lo12:__ehdr_start",
    "ldrh w10, [x9, #16]",
    "cmp w10, #3",
    "b.ne 9f",
    // x12: DT_RELR's value, x13: DT_RELRSZ's, x14: where the latter is.
    "adrp x10, _DYNAMIC",
    "add x10, x10, :lo12:_DYNAMIC",
    "mov x12, #0",
    "mov x13, #0",
    "mov x14, #0",
    "31:",
    "ldr x15, [x10]",
    "cbz x15, 32f",
    "cmp x15, #36", // DT_RELR
    "b.ne 33f",
    "ldr x12, [x10, #8]",
    "33:",
    "cmp x15, #35", // DT_RELRSZ
    "b.ne 34f",
    "ldr x13, [x10, #8]",
    "add x14, x10, #8",
    "34:",
    "add x10, x10, #16",
    "b 31b",
    "32:",
    "cbz x12, 9f",
    "cbz x13, 9f",
    // x12: the next entry, x13: the table's end, x16: the word that bit 1
    // of a bitmap entry stands for.
    "add x12, x12, x9",
    "add x13, x13, x12",
    "mov x16, #0",
    "35:",
    "cmp x12, x13",
    "b.hs 36f",
    "ldr x15, [x12], #8",
    "tbnz x15, #0, 37f",
    // An address (even): that word, and bitmaps continue after it.
    "add x16, x9, x15",
    "ldr x17, [x16]",
    "add x17, x17, x9",
    "str x17, [x16], #8",
    "b 35b",
    "37:",
    // A bitmap (odd): bit k + 1 set relocates word k after x16. Only the
    // set bits are visited, lowest first (`rbit` then `clz`).
    "lsr x15, x15, #1",
    "cbz x15, 39f",
    "38:",
    "rbit x17, x15",
    "clz x17, x17",
    "ldr x10, [x16, x17, lsl #3]",
    "add x10, x10, x9",
    "str x10, [x16, x17, lsl #3]",
    "sub x17, x15, #1",
    "and x15, x15, x17",
    "cbnz x15, 38b",
    "39:",
    "add x16, x16, #504", // 63 words
    "b 35b",
    "36:",
    // Done: musl's `_start` must find nothing left to add.
    "str xzr, [x14]",
    "9:",
    "mov x0, #0",
    "mov x1, #0",
    "mov x2, #0",
    "mov x8, #0",
    "mov x9, #0",
    "mov x10, #0",
    "mov x11, #0",
    "mov x12, #0",
    "mov x13, #0",
    "mov x14, #0",
    "mov x15, #0",
    "mov x16, #0",
    "mov x17, #0",
    "b _start",
    ".size hermes_start, . - hermes_start",
);
