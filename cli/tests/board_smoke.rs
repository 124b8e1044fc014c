//! The smoke suite every board build must pass (issue 18, SPEC X9): the
//! binary is what its target promises, `--version` answers, and a one-shot
//! with tool calls against the loopback fake provider runs to the answer and
//! leaves a stored session behind.
//!
//! By default it checks the host build (`CARGO_BIN_EXE_hermes`), so it runs
//! in every `cargo test`. `.ci/cross` runs the same suite against a
//! cross-built binary under qemu-user (the provider stays on the host, the
//! emulated `hermes` reaches it over 127.0.0.1):
//!
//! ```sh
//! HERMES_SMOKE_TARGET=aarch64-unknown-linux-musl \
//! HERMES_SMOKE_EXE=target/aarch64-unknown-linux-musl/release/hermes \
//! HERMES_SMOKE_RUNNER=qemu-aarch64-static \
//!   cargo test -p hermes-cli --test all board_smoke::
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

/// The binary under test, the command that runs it, and its target triple.
struct Subject {
    exe: PathBuf,
    runner: Vec<String>,
    target: String,
}

fn subject() -> Subject {
    let exe = std::env::var_os("HERMES_SMOKE_EXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_hermes")));
    let runner = std::env::var("HERMES_SMOKE_RUNNER")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let target = std::env::var("HERMES_SMOKE_TARGET")
        .unwrap_or_else(|_| format!("{}-unknown-linux-gnu", std::env::consts::ARCH));
    assert!(
        exe.is_file(),
        "HERMES_SMOKE_EXE={} does not exist: build it first (.ci/cross does)",
        exe.display()
    );
    Subject {
        exe,
        runner,
        target,
    }
}

impl Subject {
    fn command(&self) -> Command {
        let mut c = match self.runner.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        c
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(mut c: Command) -> Output {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{c:?} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

/// `e_machine`, ELF class and data encoding each target's binary must have.
fn expected_elf(target: &str) -> (u16, u8, &'static str) {
    const EM_X86_64: u16 = 62;
    const EM_ARM: u16 = 40;
    const EM_AARCH64: u16 = 183;
    const EM_RISCV: u16 = 243;
    match target.split('-').next().unwrap_or("") {
        "x86_64" => (EM_X86_64, 2, "x86-64"),
        "aarch64" => (EM_AARCH64, 2, "AArch64"),
        "armv7" | "arm" => (EM_ARM, 1, "ARM"),
        "riscv64gc" | "riscv64" => (EM_RISCV, 2, "RISC-V"),
        other => panic!("board_smoke knows no ELF machine for target {other}"),
    }
}

#[test]
fn binary_is_built_for_its_target() {
    let s = subject();
    let elf = std::fs::read(&s.exe).unwrap();
    assert_eq!(
        &elf[..4],
        b"\x7fELF",
        "{} is not an ELF file",
        s.exe.display()
    );
    let (machine, class, name) = expected_elf(&s.target);
    assert_eq!(elf[4], class, "ELF class (1 = 32-bit, 2 = 64-bit)");
    assert_eq!(elf[5], 1, "little-endian");
    let e_machine = u16::from_le_bytes([elf[18], elf[19]]);
    assert_eq!(
        e_machine, machine,
        "e_machine of {} is not {name}",
        s.target
    );

    if s.target.starts_with("arm") {
        // The ARM EABI header flags: version 5, hard-float calling convention.
        let e_flags = u32::from_le_bytes([elf[36], elf[37], elf[38], elf[39]]);
        assert_eq!(e_flags >> 24, 5, "EABI version 5 (e_flags {e_flags:#x})");
        assert_ne!(
            e_flags & 0x400,
            0,
            "EF_ARM_ABI_FLOAT_HARD (e_flags {e_flags:#x})"
        );
        let profile = if s.target.starts_with("armv7") && s.target.ends_with("musleabihf") {
            &ARMV7_STATIC
        } else if s.target.starts_with("armv7") {
            &ARMV7
        } else {
            &ARMV6
        };
        check_arm_attributes(&s, profile);
    }
}

/// What the suite reads of an ELF file: its type and program headers.
struct Elf {
    bytes: Vec<u8>,
    /// ELFCLASS64.
    wide: bool,
    e_type: u16,
    headers: Vec<ProgramHeader>,
}

struct ProgramHeader {
    p_type: u32,
    offset: usize,
    vaddr: u64,
    filesz: usize,
    memsz: u64,
}

impl Elf {
    fn read(path: &std::path::Path) -> Elf {
        let bytes = std::fs::read(path).unwrap();
        let wide = bytes[4] == 2;
        let mut elf = Elf {
            bytes,
            wide,
            e_type: 0,
            headers: Vec::new(),
        };
        elf.e_type = elf.num(16, 2) as u16;
        let (phoff, phentsize, phnum) = if wide {
            (elf.num(32, 8), elf.num(54, 2), elf.num(56, 2))
        } else {
            (elf.num(28, 4), elf.num(42, 2), elf.num(44, 2))
        };
        elf.headers = (0..phnum)
            .map(|i| {
                let h = (phoff + i * phentsize) as usize;
                let (offset, vaddr, filesz, memsz) = if wide {
                    let at = |field| elf.num(h + field, 8);
                    (at(8), at(16), at(32), at(40))
                } else {
                    let at = |field| elf.num(h + field, 4);
                    (at(4), at(8), at(16), at(20))
                };
                ProgramHeader {
                    p_type: elf.num(h, 4) as u32,
                    offset: offset as usize,
                    vaddr,
                    filesz: filesz as usize,
                    memsz,
                }
            })
            .collect();
        elf
    }

    /// The little-endian number of `size` bytes at `at`.
    fn num(&self, at: usize, size: usize) -> u64 {
        let mut b = [0u8; 8];
        b[..size].copy_from_slice(&self.bytes[at..at + size]);
        u64::from_le_bytes(b)
    }

    fn word(&self) -> usize {
        if self.wide { 8 } else { 4 }
    }

    /// The `_DYNAMIC` entries (tag, value) up to `DT_NULL`.
    fn dynamic_entries(&self) -> Vec<(u64, u64)> {
        const PT_DYNAMIC: u32 = 2;
        let word = self.word();
        self.headers
            .iter()
            .filter(|h| h.p_type == PT_DYNAMIC)
            .flat_map(|h| (h.offset..h.offset + h.filesz).step_by(2 * word))
            .map(|at| (self.num(at, word), self.num(at + word, word)))
            .take_while(|&(tag, _)| tag != 0)
            .collect()
    }

    /// The file offset of a loaded address.
    fn offset_of(&self, vaddr: u64) -> usize {
        const PT_LOAD: u32 = 1;
        let h = self
            .headers
            .iter()
            .find(|h| h.p_type == PT_LOAD && (h.vaddr..h.vaddr + h.filesz as u64).contains(&vaddr))
            .unwrap_or_else(|| panic!("{vaddr:#x} is in no PT_LOAD"));
        h.offset + (vaddr - h.vaddr) as usize
    }
}

/// A musl target is the static build the packages ship (issue 39): a
/// position-independent executable (ELF type DYN, so ASLR still places it)
/// with no program interpreter — no loader and no libc needed on the board —
/// and its relative relocations packed (`DT_RELR`), which musl's start-up
/// code applies itself. A glibc build is the dynamic one: it names its loader.
#[test]
fn a_musl_build_is_static_pie_with_packed_relocations() {
    const ET_DYN: u16 = 3;
    const PT_INTERP: u32 = 3;
    const DT_RELR: u64 = 36;
    let s = subject();
    let elf = Elf::read(&s.exe);
    let interp = elf.headers.iter().any(|h| h.p_type == PT_INTERP);
    let dynamic_tags: Vec<u64> = elf.dynamic_entries().iter().map(|&(tag, _)| tag).collect();
    assert_eq!(elf.e_type, ET_DYN, "a position-independent executable");
    if s.target.contains("musl") {
        assert!(!interp, "a static executable has no PT_INTERP");
        assert!(
            dynamic_tags.contains(&DT_RELR),
            "relative relocations packed (DT_RELR); dynamic tags: {dynamic_tags:?}"
        );
    } else {
        assert!(interp, "a glibc build is dynamic: it names its loader");
    }
}

/// A static build's first system call asks for every page its relocation
/// will write, in one call (`cli/src/start/`): `madvise` from the
/// `PT_GNU_RELRO` segment to the end of the last loaded one (`.data`,
/// `.bss`) with `MADV_POPULATE_WRITE`, before musl's start-up code touches
/// them. qemu-user's `-strace` shows the calls of either
/// architecture (qemu-user-static, which `.ci/cross` installs); it may not
/// carry the advice out, which is why the figures are measured natively
/// (`scripts/budgets.sh`).
#[test]
fn a_static_build_asks_for_its_relocated_pages_at_once() {
    const PT_GNU_RELRO: u32 = 0x6474_e552;
    let s = subject();
    if !s.target.contains("musl") {
        return; // a glibc build: ld.so relocates it before our code runs
    }
    let elf = Elf::read(&s.exe);
    let relro = elf
        .headers
        .iter()
        .find(|h| h.p_type == PT_GNU_RELRO)
        .expect("a PT_GNU_RELRO segment");
    // The suite's runner (with its CPU), or qemu-user for the host's build.
    let qemu: Vec<String> = match s.runner.as_slice() {
        [] => vec![format!("qemu-{}-static", std::env::consts::ARCH)],
        runner => runner.to_vec(),
    };
    let o = Command::new(&qemu[0])
        .args(&qemu[1..])
        .arg("-strace")
        .arg(&s.exe)
        .arg("--version")
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("{} (qemu-user-static) runs the check: {e}", qemu[0]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let calls = text(&o.stderr);
    let first = calls
        .lines()
        .next()
        .expect("qemu -strace printed the calls");
    // "<pid> madvise(0x…,<length>,MADV_POPULATE_WRITE) = …"
    let arguments = first
        .split_once("madvise(")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(arguments, _)| arguments.split(',').collect::<Vec<_>>())
        .unwrap_or_else(|| panic!("the first call is madvise: {first}"));
    assert_eq!(arguments.get(2), Some(&"MADV_POPULATE_WRITE"), "{first}");
    const PT_LOAD: u32 = 1;
    let end = elf
        .headers
        .iter()
        .filter(|h| h.p_type == PT_LOAD)
        .map(|h| h.vaddr + h.memsz)
        .max()
        .unwrap();
    let span = end - relro.vaddr;
    let length: u64 = arguments[1].parse().unwrap();
    assert!(
        span >= relro.memsz && length >= span && length < span + 65536,
        "PT_GNU_RELRO to the end of the last PT_LOAD ({span} bytes), from the start of its page: {first}"
    );
}

/// `hermes_start` applies the static build's packed relocations itself and
/// leaves musl's `_start` none to apply (`cli/src/start/`): a word missed
/// or relocated twice would be a wrong pointer, perhaps one that is rarely
/// followed. So a running process's memory is read (`/proc/<pid>/mem`,
/// while it waits for a provider that never answers) and every word the
/// `DT_RELR` table names inside `PT_GNU_RELRO` — which nothing writes
/// after start-up — must hold the file's value plus one and the same load
/// address. Under qemu-user the process read is qemu's, which maps the
/// guest's image at a host address of its own: the words are read there,
/// and the load address is the guest's, which the words themselves show
/// (a missed word would add nothing, one relocated twice twice as much).
#[test]
fn a_static_build_relocates_each_word_once() {
    let s = subject();
    let arch = s.target.split('-').next().unwrap_or("");
    if !s.target.contains("musl") || (s.runner.is_empty() && arch != std::env::consts::ARCH) {
        return;
    }
    let elf = Elf::read(&s.exe);
    let relocated = relocated_words_in_relro(&elf);
    assert!(
        relocated.len() > 10_000,
        "{} relocated words in PT_GNU_RELRO",
        relocated.len()
    );

    let provider = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut c = s.command();
    c.env("HOME", home.path())
        .env("HERMES_HOME", home.path())
        .env(
            "HERMES_BASE_URL",
            format!("http://{}/v1", provider.local_addr().unwrap()),
        )
        .env("HERMES_MODEL", "fake-model")
        .args(["-Q", "-z", "hello"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    // Once it asks, start-up is long over; it waits for the answer.
    provider.set_nonblocking(true).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let _asking = loop {
        match provider.accept() {
            Ok(connection) => break connection,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("hermes ended ({status}) before asking the provider");
                }
                assert!(std::time::Instant::now() < deadline, "hermes never asked");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    // Where the image's first page lies in the process read: the program's
    // load address natively, qemu's host address for it under qemu.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
    let exe = std::fs::canonicalize(&s.exe).unwrap();
    let mapped = maps
        .lines()
        .find(|line| line.ends_with(exe.to_str().unwrap()))
        .and_then(|line| line.split('-').next())
        .map(|start| u64::from_str_radix(start, 16).unwrap())
        .expect("the image's first mapping");
    let mut memory = std::fs::File::open(format!("/proc/{}/mem", child.id())).unwrap();
    let word = elf.word();
    let mask = if elf.wide {
        u64::MAX
    } else {
        u64::from(u32::MAX)
    };
    // What each word holds beyond the file's value.
    let added: Vec<(u64, u64)> = relocated
        .iter()
        .map(|&address| {
            use std::io::{Read, Seek, SeekFrom};
            let mut bytes = [0u8; 8];
            memory.seek(SeekFrom::Start(mapped + address)).unwrap();
            memory.read_exact(&mut bytes[..word]).unwrap();
            let value = u64::from_le_bytes(bytes);
            (
                address,
                value.wrapping_sub(elf.num(elf.offset_of(address), word)) & mask,
            )
        })
        .collect();
    child.kill().unwrap();
    child.wait().unwrap();
    let base = added[0].1;
    if s.runner.is_empty() {
        assert_eq!(
            base, mapped,
            "the first relocated word holds the load address"
        );
    }
    assert_ne!(base, 0, "the first relocated word is relocated");
    let wrong: Vec<u64> = added
        .iter()
        .filter(|(_, plus)| *plus != base)
        .map(|(address, _)| *address)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} relocated words differ from the file's value plus {base:#x}, first at {:#x?}",
        wrong.len(),
        added.len(),
        &wrong[..wrong.len().min(8)]
    );
}

/// The addresses the image's `DT_RELR` table names inside `PT_GNU_RELRO`
/// (which nothing writes after start-up): an even entry is one address,
/// an odd one a bitmap of the words after the last (63 of them in a
/// 64-bit image, 31 in a 32-bit one).
fn relocated_words_in_relro(elf: &Elf) -> Vec<u64> {
    const PT_GNU_RELRO: u32 = 0x6474_e552;
    const DT_RELRSZ: u64 = 35;
    const DT_RELR: u64 = 36;
    let word = elf.word();
    let dynamic = elf.dynamic_entries();
    let value_of = |tag| dynamic.iter().find(|&&(t, _)| t == tag).map(|&(_, v)| v);
    let (Some(table), Some(size)) = (value_of(DT_RELR), value_of(DT_RELRSZ)) else {
        panic!("a DT_RELR table: {dynamic:?}");
    };
    assert!(table != 0 && size != 0, "a DT_RELR table: {dynamic:?}");
    let bits = 8 * word as u64;
    let mut relocated = Vec::new();
    let mut next = 0;
    let start = elf.offset_of(table);
    for entry in (start..start + size as usize).step_by(word) {
        let value = elf.num(entry, word);
        if value & 1 == 0 {
            relocated.push(value);
            next = value + word as u64;
        } else {
            relocated.extend(
                (1..bits)
                    .filter(|bit| value >> bit & 1 == 1)
                    .map(|bit| next + (bit - 1) * word as u64),
            );
            next += (bits - 1) * word as u64;
        }
    }
    let relro = elf
        .headers
        .iter()
        .find(|h| h.p_type == PT_GNU_RELRO)
        .expect("a PT_GNU_RELRO segment");
    relocated
        .into_iter()
        .filter(|a| (relro.vaddr..relro.vaddr + relro.filesz as u64).contains(a))
        .collect()
}

/// What an ARM build promises its boards, as build attributes and as the
/// CPU its suite runs on under qemu.
struct ArmProfile {
    /// `Tag_CPU_arch` values readelf may print.
    arch: &'static [&'static str],
    /// `Tag_CPU_arch_profile` (ARMv7 names one; ARMv6 has none).
    arch_profile: &'static str,
    thumb: &'static [&'static str],
    fp: &'static [&'static str],
    /// qemu-user's `-cpu`: a core with no more than the boards have.
    qemu_cpu: &'static str,
}

/// ARMv7-A with Thumb-2, hard-float arguments, an FPU of the VFPv3 family. A
/// peer's "ARMv6" build was really ARMv7 + NEON and crashed on the boards it
/// claimed.
///
/// Two facts the tags show and README states: Rust's prebuilt std for this
/// target uses all 32 VFP D registers (VFPv3-D32, as on every ARMv7 with
/// NEON; VFPv3-D16-only cores such as Tegra 2 cannot run it), and the merged
/// tags cannot prove "no NEON": ring's hand-written assembly contains NEON
/// routines it calls only when `AT_HWCAP` reports NEON. The proof is
/// dynamic: under qemu the suite must run on a Cortex-A7 with NEON switched
/// off, where any NEON instruction is an illegal instruction — so every test
/// here, the TLS handshake's X25519 included, shows the binary never
/// executes one unasked.
const ARMV7: ArmProfile = ArmProfile {
    arch: &["v7"],
    arch_profile: "Application",
    thumb: &["Thumb-2"],
    fp: &["VFPv3-D16", "VFPv3"],
    qemu_cpu: "cortex-a7,neon=off",
};

/// The static armv7 build (the armhf package): as [`ARMV7`], but its
/// standard library is built from source for the target's own features
/// (`+vfp3d16`) and its C by Zig for the same CPU, so it uses 16 D
/// registers only and runs on VFPv3-D16 cores (Tegra 2) too.
const ARMV7_STATIC: ArmProfile = ArmProfile {
    fp: &["VFPv3-D16"],
    ..ARMV7
};

/// ARMv6 with VFPv2 (the Pi Zero's and Pi 1's ARM1176JZF-S): nothing of
/// ARMv7 (no Thumb-2, no `movw`), which the suite proves the same way, on an
/// emulated ARM1176.
const ARMV6: ArmProfile = ArmProfile {
    arch: &["v6", "v6K", "v6KZ"],
    arch_profile: "",
    thumb: &["Thumb-1", "Thumb-1 (legacy)"],
    fp: &["VFPv2"],
    qemu_cpu: "arm1176",
};

/// The build attributes the linker merged from every object, against the
/// target's profile.
fn check_arm_attributes(s: &Subject, profile: &ArmProfile) {
    let o = Command::new("readelf")
        .arg("-A")
        .arg(&s.exe)
        .output()
        .expect("readelf (binutils) is needed to check ARM build attributes");
    assert!(o.status.success(), "readelf -A: {}", text(&o.stderr));
    let attrs = text(&o.stdout);
    let tag = |name: &str| -> String {
        attrs
            .lines()
            .find_map(|l| {
                let (k, v) = l.trim().split_once(':')?;
                (k == name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let arch = tag("Tag_CPU_arch");
    assert!(
        profile.arch.contains(&arch.as_str()),
        "Tag_CPU_arch {arch:?}: {attrs}"
    );
    assert_eq!(tag("Tag_CPU_arch_profile"), profile.arch_profile, "{attrs}");
    let thumb = tag("Tag_THUMB_ISA_use");
    assert!(
        profile.thumb.contains(&thumb.as_str()),
        "Tag_THUMB_ISA_use {thumb:?}: {attrs}"
    );
    assert_eq!(
        tag("Tag_ABI_VFP_args"),
        "VFP registers",
        "hard-float calling convention: {attrs}"
    );
    let fp = tag("Tag_FP_arch");
    assert!(
        profile.fp.contains(&fp.as_str()),
        "Tag_FP_arch {fp:?} is not one of {:?} (a newer FPU would exclude boards): {attrs}",
        profile.fp
    );
    if !s.runner.is_empty() {
        let cpu = s
            .runner
            .windows(2)
            .find(|w| w[0] == "-cpu")
            .map(|w| w[1].as_str());
        assert_eq!(
            cpu,
            Some(profile.qemu_cpu),
            "run this suite on a CPU with no more than the boards have: -cpu {} in HERMES_SMOKE_RUNNER",
            profile.qemu_cpu
        );
    }
}

#[test]
fn version_answers() {
    let s = subject();
    let mut c = s.command();
    c.arg("--version");
    let o = run(c);
    assert_eq!(
        text(&o.stdout),
        format!("hermes {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn oneshot_with_tool_calls_reaches_the_answer_and_stores_the_session() {
    let s = subject();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("board.txt"), "model: Raspberry Pi 4\n").unwrap();
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "read_file", r#"{"path":"board.txt"}"#),
        Reply::tool(
            "c2",
            "write_file",
            r#"{"path":"out/answer.txt","content":"written on the board\n"}"#,
        ),
        Reply::tool(
            "c3",
            "todo",
            r#"{"action":"add","items":["flash the card"]}"#,
        ),
        Reply::text("It is a Raspberry Pi 4."),
    ])
    .unwrap();
    let base_url = provider.base_url();
    let with_env = |c: &mut Command| {
        c.env("HOME", home.path())
            .env("HERMES_HOME", home.path())
            .env("HERMES_BASE_URL", &base_url)
            .env("HERMES_MODEL", "fake-model")
            .current_dir(work.path());
    };

    let mut c = s.command();
    with_env(&mut c);
    c.args(["-z", "Which board is this?", "--toolsets", "file,todo"]);
    let o = run(c);
    assert_eq!(text(&o.stdout), "It is a Raspberry Pi 4.\n");
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    let tool_result = |request: &Value, i: usize| {
        request["messages"][i]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    // messages: system, user, assistant(call), tool, …
    assert!(
        tool_result(&requests[1], 3).contains("Raspberry Pi 4"),
        "read_file result: {}",
        tool_result(&requests[1], 3)
    );
    assert!(
        tool_result(&requests[3], 7).contains("flash the card"),
        "todo result: {}",
        tool_result(&requests[3], 7)
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("out/answer.txt")).unwrap(),
        "written on the board\n"
    );

    // The emulated process wrote the session to SQLite: it lists it again,
    // and the full-text index (FTS5, built on the board) finds the answer.
    let mut c = s.command();
    with_env(&mut c);
    c.args(["sessions", "list"]);
    let listing = text(&run(c).stdout);
    // user, 3 × (assistant call + tool result), answer
    assert!(
        listing
            .lines()
            .any(|row| row.contains("Which board is this?")
                && row.split_whitespace().any(|cell| cell == "8")),
        "sessions list: {listing}"
    );
    let mut c = s.command();
    with_env(&mut c);
    c.args(["sessions", "search", "Raspberry"]);
    let hits = text(&run(c).stdout);
    assert!(hits.contains("assistant"), "sessions search: {hits}");
}

/// An `https` provider makes the TLS stack build a ClientHello, whose X25519
/// key share ring computes with the code it picked for this CPU at run time
/// (NEON on an ARMv7 that reports it). The loopback server only reads the
/// ClientHello and hangs up, so the run fails the ordinary way — exit 1,
/// "provider unreachable" — never by a signal such as SIGILL. Under
/// `.ci/cross`'s NEON-less armv7 CPU this proves the dispatch asks first.
#[test]
fn tls_handshake_crypto_runs_on_this_cpu() {
    use std::io::Read;
    use std::net::TcpListener;

    let s = subject();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        // The first connection's first record: a handshake (0x16) record
        // header and the start of the ClientHello (type 1).
        let (mut conn, _) = listener.accept().ok()?;
        let mut head = [0u8; 6];
        conn.read_exact(&mut head).ok()?;
        Some(head)
    });
    let home = tempfile::tempdir().unwrap();
    let mut c = s.command();
    c.env("HOME", home.path())
        .env("HERMES_HOME", home.path())
        .env("HERMES_BASE_URL", format!("https://127.0.0.1:{port}/v1"))
        .env("HERMES_MODEL", "fake-model")
        .current_dir(home.path())
        .args(["-z", "hello over TLS"]);
    let o = c.output().unwrap();
    // Wakes the server if hermes never connected (then it reads nothing).
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let head = server.join().unwrap().unwrap_or_else(|| {
        panic!(
            "hermes sent no ClientHello ({}); stderr: {}",
            o.status,
            text(&o.stderr)
        )
    });
    assert_eq!(head[0], 0x16, "a TLS handshake record: {head:?}");
    assert_eq!(head[5], 1, "a ClientHello: {head:?}");
    assert_eq!(
        o.status.code(),
        Some(1),
        "a refused handshake is a runtime failure, not a crash ({}); stderr: {}",
        o.status,
        text(&o.stderr)
    );
}
