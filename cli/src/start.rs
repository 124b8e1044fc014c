//! The static builds' entry point (issue 39): before musl's `_start`
//! relocates the image, ask the kernel for every page the relocations will
//! write, in one call.
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
    "jne 3f",
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
    "xor eax, eax",
    "xor ecx, ecx",
    "xor edx, edx",
    "xor esi, esi",
    "xor edi, edi",
    "xor r8d, r8d",
    "xor r9d, r9d",
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
    "cbz x10, 9f", // AT_NULL: no page size, no advice
    "cmp x10, #6", // AT_PAGESZ
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
    "cbz x15, 9f",
    "cmp x16, x15",
    "b.ls 9f",
    // madvise(base + relro rounded down to its page, up to base + end,
    // MADV_POPULATE_WRITE).
    "add x15, x15, x9",
    "add x16, x16, x9",
    "bic x0, x15, x11",
    "sub x1, x16, x0",
    "mov x2, #23",
    "mov x8, #233",
    "svc #0",
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
