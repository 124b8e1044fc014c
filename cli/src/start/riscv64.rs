//! `hermes_start` for riscv64 (see the parent module). ELF64 as on x86_64
//! (`e_phoff` at 32, `e_phnum` at 56, program headers of 56 bytes,
//! `_DYNAMIC` entries of 16). Pages are 4 KiB on RISC-V Linux.
//!
//! riscv64gc has no instruction that finds a word's lowest set bit (that
//! is Zbb), so a bitmap's bits are tested one by one, as musl does; the
//! `madvise` is the gain here. No linker relaxation inside: musl's `_start`
//! sets `gp` only after this has run, so no address here may become
//! `gp`-relative. The jump to `_start` goes through `t0` (a `j` reaches
//! 1 MiB, the program is larger), the one register left non-zero.

core::arch::global_asm!(
    ".text",
    ".globl hermes_start",
    ".type hermes_start, @function",
    ".p2align 2",
    "hermes_start:",
    ".option push",
    ".option norelax",
    // t0: the ELF header; only an ET_DYN image is relocated.
    "lla t0, __ehdr_start",
    "lhu t1, 16(t0)",
    "li t2, 3",
    "bne t1, t2, 9f",
    // t1: the program headers (e_phoff), t2: how many (e_phnum);
    // t3: PT_GNU_RELRO's p_vaddr, t4: the end of the last PT_LOAD.
    "ld t1, 32(t0)",
    "add t1, t1, t0",
    "lhu t2, 56(t0)",
    "li t5, 0x6474e552", // PT_GNU_RELRO
    "li t3, 0",
    "li t4, 0",
    "2:",
    "beqz t2, 5f",
    "lwu t6, 0(t1)",
    "bne t6, t5, 6f",
    "ld t3, 16(t1)",
    "6:",
    "li a0, 1", // PT_LOAD
    "bne t6, a0, 7f",
    "ld a0, 16(t1)",
    "ld a1, 40(t1)",
    "add a0, a0, a1",
    "bleu a0, t4, 7f",
    "mv t4, a0",
    "7:",
    "addi t1, t1, 56",
    "addi t2, t2, -1",
    "j 2b",
    "5:",
    "beqz t3, 3f",
    "bleu t4, t3, 3f",
    // madvise(base + relro rounded down to its page, up to base + end,
    // MADV_POPULATE_WRITE): a7 = 233, the generic madvise.
    "add t3, t3, t0",
    "add t4, t4, t0",
    "srli a0, t3, 12",
    "slli a0, a0, 12",
    "sub a1, t4, a0",
    "li a2, 23",
    "li a7, 233",
    "ecall",
    "3:",
    // The relocations (see "Relocated here"). t0: the image's base.
    "lla t0, __ehdr_start",
    // t2: DT_RELR's value, t3: DT_RELRSZ's, t4: where the latter is.
    "lla t1, _DYNAMIC",
    "li t2, 0",
    "li t3, 0",
    "li t4, 0",
    "20:",
    "ld t5, 0(t1)",
    "beqz t5, 21f",
    "li t6, 36", // DT_RELR
    "bne t5, t6, 22f",
    "ld t2, 8(t1)",
    "22:",
    "li t6, 35", // DT_RELRSZ
    "bne t5, t6, 23f",
    "ld t3, 8(t1)",
    "addi t4, t1, 8",
    "23:",
    "addi t1, t1, 16",
    "j 20b",
    "21:",
    "beqz t2, 9f",
    "beqz t3, 9f",
    // t2: the next entry, t3: the table's end, a0: the word that bit 1
    // of a bitmap entry stands for.
    "add t2, t2, t0",
    "add t3, t3, t2",
    "li a0, 0",
    "24:",
    "bgeu t2, t3, 25f",
    "ld t5, 0(t2)",
    "addi t2, t2, 8",
    "andi t6, t5, 1",
    "bnez t6, 26f",
    // An address (even): that word, and bitmaps continue after it.
    "add a0, t0, t5",
    "ld t6, 0(a0)",
    "add t6, t6, t0",
    "sd t6, 0(a0)",
    "addi a0, a0, 8",
    "j 24b",
    "26:",
    // A bitmap (odd): bit k + 1 set relocates word k after a0, tested one
    // by one until no set bit is left.
    "srli t5, t5, 1",
    "mv a1, a0",
    "27:",
    "beqz t5, 28f",
    "andi t6, t5, 1",
    "beqz t6, 29f",
    "ld a2, 0(a1)",
    "add a2, a2, t0",
    "sd a2, 0(a1)",
    "29:",
    "srli t5, t5, 1",
    "addi a1, a1, 8",
    "j 27b",
    "28:",
    "addi a0, a0, 504", // 63 words
    "j 24b",
    "25:",
    // Done: musl's `_start` must find nothing left to add.
    "sd zero, 0(t4)",
    "9:",
    "li t1, 0",
    "li t2, 0",
    "li t3, 0",
    "li t4, 0",
    "li t5, 0",
    "li t6, 0",
    "li a0, 0",
    "li a1, 0",
    "li a2, 0",
    "li a7, 0",
    "lla t0, _start",
    "jr t0",
    ".option pop",
    ".size hermes_start, . - hermes_start",
);
