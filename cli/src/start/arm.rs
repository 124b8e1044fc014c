//! `hermes_start` for 32-bit ARM (see the parent module): armv7 and armv6
//! alike, so nothing newer than ARMv6 (`clz` is ARMv5; no `rbit`, `movw`
//! or Thumb-2). ARM state, as the kernel enters a program. ELF32: the
//! header's `e_phoff` at 28 and `e_phnum` at 44, program headers of 32
//! bytes (`p_vaddr` at 8, `p_memsz` at 20), `_DYNAMIC` entries of 8 and
//! relocated words of 4 bytes. Pages are 4 KiB on 32-bit ARM Linux.
//!
//! Addresses come PC-relative from the words after the code (a `ldr` from
//! there, then `add` of `pc`, which reads 8 bytes ahead in ARM state), as
//! musl's own `_start` finds `_DYNAMIC`.

core::arch::global_asm!(
    ".text",
    ".syntax unified",
    ".arm",
    ".globl hermes_start",
    ".type hermes_start, %function",
    ".p2align 2",
    "hermes_start:",
    // r0: the ELF header; only an ET_DYN image is relocated.
    "ldr r0, 90f",
    "80:",
    "add r0, pc, r0",
    "ldrh r1, [r0, #16]",
    "cmp r1, #3",
    "bne 9f",
    // r1: the program headers (e_phoff), r2: how many (e_phnum);
    // r3: PT_GNU_RELRO's p_vaddr, r12: the end of the last PT_LOAD.
    "ldr r1, [r0, #28]",
    "add r1, r1, r0",
    "ldrh r2, [r0, #44]",
    "ldr r4, 91f", // PT_GNU_RELRO
    "mov r3, #0",
    "mov r12, #0",
    "2:",
    "cmp r2, #0",
    "beq 5f",
    "ldr r5, [r1]",
    "cmp r5, r4",
    "ldreq r3, [r1, #8]",
    "cmp r5, #1", // PT_LOAD
    "bne 7f",
    "ldr r5, [r1, #8]",
    "ldr r6, [r1, #20]",
    "add r5, r5, r6",
    "cmp r5, r12",
    "movhi r12, r5",
    "7:",
    "add r1, r1, #32",
    "sub r2, r2, #1",
    "b 2b",
    "5:",
    "cmp r3, #0",
    "beq 3f",
    "cmp r12, r3",
    "bls 3f",
    // madvise(base + relro rounded down to its page, up to base + end,
    // MADV_POPULATE_WRITE): r7 = 220, the EABI's madvise.
    "add r3, r3, r0",
    "add r12, r12, r0",
    "lsr r3, r3, #12",
    "lsl r0, r3, #12",
    "sub r1, r12, r0",
    "mov r2, #23",
    "mov r7, #220",
    "svc #0",
    "3:",
    // The relocations (see "Relocated here"). r0: the image's base.
    "ldr r0, 92f",
    "81:",
    "add r0, pc, r0",
    // r2: DT_RELR's value, r3: DT_RELRSZ's, r4: where the latter is.
    "ldr r1, 93f",
    "82:",
    "add r1, pc, r1",
    "mov r2, #0",
    "mov r3, #0",
    "mov r4, #0",
    "20:",
    "ldr r5, [r1]",
    "cmp r5, #0",
    "beq 21f",
    "cmp r5, #36", // DT_RELR
    "ldreq r2, [r1, #4]",
    "cmp r5, #35", // DT_RELRSZ
    "ldreq r3, [r1, #4]",
    "addeq r4, r1, #4",
    "add r1, r1, #8",
    "b 20b",
    "21:",
    "cmp r2, #0",
    "beq 9f",
    "cmp r3, #0",
    "beq 9f",
    // r2: the next entry, r3: the table's end, r6: the word that bit 1
    // of a bitmap entry stands for.
    "add r2, r2, r0",
    "add r3, r3, r2",
    "mov r6, #0",
    "24:",
    "cmp r2, r3",
    "bhs 25f",
    "ldr r5, [r2], #4",
    "tst r5, #1",
    "bne 26f",
    // An address (even): that word, and bitmaps continue after it.
    "add r6, r0, r5",
    "ldr r7, [r6]",
    "add r7, r7, r0",
    "str r7, [r6], #4",
    "b 24b",
    "26:",
    // A bitmap (odd): bit k + 1 set relocates word k after r6. Only the
    // set bits are visited, lowest first: k = 31 - clz(x & -x).
    "lsrs r5, r5, #1",
    "beq 28f",
    "27:",
    "rsb r7, r5, #0",
    "and r7, r7, r5",
    "clz r7, r7",
    "rsb r7, r7, #31",
    "ldr r8, [r6, r7, lsl #2]",
    "add r8, r8, r0",
    "str r8, [r6, r7, lsl #2]",
    "sub r7, r5, #1",
    "ands r5, r5, r7",
    "bne 27b",
    "28:",
    "add r6, r6, #124", // 31 words
    "b 24b",
    "25:",
    // Done: musl's `_start` must find nothing left to add.
    "mov r5, #0",
    "str r5, [r4]",
    "9:",
    "mov r0, #0",
    "mov r1, #0",
    "mov r2, #0",
    "mov r3, #0",
    "mov r4, #0",
    "mov r5, #0",
    "mov r6, #0",
    "mov r7, #0",
    "mov r8, #0",
    "mov r12, #0",
    "b _start",
    // The PC-relative addresses and the constant the code loads.
    ".p2align 2",
    "90:",
    ".word __ehdr_start - 80b - 8",
    "91:",
    ".word 0x6474e552",
    "92:",
    ".word __ehdr_start - 81b - 8",
    "93:",
    ".word _DYNAMIC - 82b - 8",
    ".size hermes_start, . - hermes_start",
);
