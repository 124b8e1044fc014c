//! The one owner of the terminal: streamed answer text (stdout), notices,
//! log lines and the spinner (stderr) all go through [`Term`], under one
//! lock, so they never interleave.
//!
//! Why one lock: the spinner is drawn by its own thread. With separate
//! writers the thread could read "still waiting", the answer's first chunk
//! could be printed, and the thread would then redraw (and later clear) the
//! line holding that chunk — the "streamed answers lose their first
//! characters" bug. Here the spinner draws and erases only while holding the
//! lock, and only when the cursor is at the start of an empty line.
//!
//! Also here: what the terminal can do ([`Caps`]: TTY or not, colour
//! allowed, width) and [`TypeAhead`], which keeps keys typed while a turn
//! runs from being echoed into the answer.

use std::io::{IsTerminal, Write};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use hermes_runtime::sync::lock;

/// What the terminal allows, decided once at start-up.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// stderr is a terminal.
    pub err_tty: bool,
    /// stdin is a terminal.
    pub in_tty: bool,
    /// ANSI styles may be written to stdout (a TTY, `NO_COLOR` unset, not `TERM=dumb`).
    pub out_ansi: bool,
    /// ANSI styles may be written to stderr.
    pub err_ansi: bool,
}

impl Caps {
    fn detect() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let out_tty = std::io::stdout().is_terminal();
        let err_tty = std::io::stderr().is_terminal();
        Caps {
            err_tty,
            in_tty: std::io::stdin().is_terminal(),
            out_ansi: out_tty && !no_color && !dumb,
            err_ansi: err_tty && !no_color && !dumb,
        }
    }
}

/// The terminal's width in columns (stdout, else stderr), 80 when unknown.
pub fn width() -> usize {
    for fd in [libc_fd::STDOUT, libc_fd::STDERR] {
        if let Some(cols) = columns_of(fd) {
            return cols;
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|c| *c > 0)
        .unwrap_or(80)
}

mod libc_fd {
    pub const STDOUT: i32 = 1;
    pub const STDERR: i32 = 2;
}

fn columns_of(fd: i32) -> Option<usize> {
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we pass; a fd
    // that is not a terminal makes the call fail without writing.
    let mut size = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let rc = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// A few ANSI styles; empty strings when styles are off.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    on: bool,
}

impl Style {
    /// Styles for stdout (`for_out`) or stderr.
    pub fn new(on: bool) -> Self {
        Style { on }
    }

    fn wrap(self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Dim (secondary information).
    pub fn dim(self, t: &str) -> String {
        self.wrap("2", t)
    }
    /// Bold.
    pub fn bold(self, t: &str) -> String {
        self.wrap("1", t)
    }
    /// Green (success).
    pub fn green(self, t: &str) -> String {
        self.wrap("32", t)
    }
    /// Red (failure).
    pub fn red(self, t: &str) -> String {
        self.wrap("31", t)
    }
    /// Yellow (warnings).
    pub fn yellow(self, t: &str) -> String {
        self.wrap("33", t)
    }
    /// Cyan (tool activity, names).
    pub fn cyan(self, t: &str) -> String {
        self.wrap("36", t)
    }
}

struct Spin {
    label: String,
    started: Instant,
    frame: usize,
    /// Columns drawn on the current line (0 = not shown).
    drawn: usize,
}

#[derive(Default)]
struct State {
    spinner: Option<Spin>,
    /// Streamed text has been written since the last newline (on stdout).
    out_mid_line: bool,
    /// A line of our own broke an open line of streamed text: the
    /// stream's raw echo is no longer on the line it was written to
    /// ([`Term::take_stream_broken`]).
    stream_broken: bool,
    thread_started: bool,
}

/// The terminal writer. One per process: [`term`].
pub struct Term {
    /// What the terminal allows.
    pub caps: Caps,
    state: Mutex<State>,
}

static TERM: OnceLock<Term> = OnceLock::new();

/// The process's terminal writer.
pub fn term() -> &'static Term {
    TERM.get_or_init(|| Term {
        caps: Caps::detect(),
        state: Mutex::new(State::default()),
    })
}

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

impl Term {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Styles for stderr.
    pub fn err_style(&self) -> Style {
        Style::new(self.caps.err_ansi)
    }

    /// Styles for stdout.
    pub fn out_style(&self) -> Style {
        Style::new(self.caps.out_ansi)
    }

    /// Shows a spinner with `label` on stderr until [`Term::spinner_stop`]
    /// (a no-op when stderr is not a terminal).
    pub fn spinner_start(&'static self, label: &str) {
        if !self.caps.err_tty {
            return;
        }
        let mut st = self.lock();
        match &mut st.spinner {
            Some(s) => s.label = label.to_owned(),
            None => {
                st.spinner = Some(Spin {
                    label: label.to_owned(),
                    started: Instant::now(),
                    frame: 0,
                    drawn: 0,
                })
            }
        }
        if !st.thread_started {
            st.thread_started = true;
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(80));
                    self.tick();
                }
            });
        }
    }

    /// Hides the spinner (erasing it) and stops it.
    pub fn spinner_stop(&self) {
        let mut st = self.lock();
        self.erase_spinner(&mut st);
        st.spinner = None;
    }

    fn tick(&self) {
        let mut st = self.lock();
        if st.out_mid_line {
            return;
        }
        let Some(spin) = &mut st.spinner else {
            return;
        };
        spin.frame += 1;
        let secs = spin.started.elapsed().as_secs();
        let elapsed = if secs >= 2 {
            format!(" {secs}s")
        } else {
            String::new()
        };
        let text = format!(
            "{} {}{elapsed}",
            FRAMES[spin.frame % FRAMES.len()],
            spin.label
        );
        let cols = unicode_width::UnicodeWidthStr::width(text.as_str());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{}", self.err_style().dim(&text));
        // Without ANSI the previous frame is overwritten by padding.
        if cols < spin.drawn {
            let _ = write!(err, "{}", " ".repeat(spin.drawn - cols));
        }
        let _ = err.flush();
        spin.drawn = cols.max(spin.drawn);
    }

    fn erase_spinner(&self, st: &mut State) {
        if let Some(spin) = &mut st.spinner
            && spin.drawn > 0
        {
            let mut err = std::io::stderr().lock();
            if self.caps.err_ansi {
                let _ = write!(err, "\r\x1b[2K");
            } else {
                let _ = write!(err, "\r{}\r", " ".repeat(spin.drawn));
            }
            let _ = err.flush();
            spin.drawn = 0;
        }
    }

    /// Writes streamed answer text to stdout.
    pub fn out(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut st = self.lock();
        self.erase_spinner(&mut st);
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        st.out_mid_line = !text.ends_with('\n');
    }

    /// Whether a notice broke the open line of streamed text since the
    /// last call (the Ctrl-C hint, a tool line): the markdown stream then
    /// must not erase "its" echo, which is now above the notice — it would
    /// print the partial line a second time.
    pub fn take_stream_broken(&self) -> bool {
        std::mem::take(&mut self.lock().stream_broken)
    }

    /// Ends a line of streamed text, if one is open.
    pub fn end_line(&self) {
        let mut st = self.lock();
        if st.out_mid_line {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n");
            let _ = out.flush();
            st.out_mid_line = false;
        }
    }

    /// Writes `line` (a notice, a tool line, a log line) to stderr on a line
    /// of its own: the spinner is erased first and redrawn after it.
    pub fn line(&self, line: &str) {
        let mut st = self.lock();
        self.erase_spinner(&mut st);
        if st.out_mid_line {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n");
            let _ = out.flush();
            st.out_mid_line = false;
            st.stream_broken = true;
        }
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}", line.trim_end_matches('\n'));
        let _ = err.flush();
    }

    /// Writes `line` to stdout (command output in the interactive loop),
    /// ordered with everything else.
    pub fn println(&self, line: &str) {
        let mut st = self.lock();
        self.erase_spinner(&mut st);
        let mut out = std::io::stdout().lock();
        if st.out_mid_line {
            let _ = out.write_all(b"\n");
            st.out_mid_line = false;
            st.stream_broken = true;
        }
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// A `tracing` writer that hands each formatted event to [`Term::line`].
#[derive(Debug, Default)]
pub struct LogWriter {
    buf: Vec<u8>,
}

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            term().line(&String::from_utf8_lossy(&self.buf));
        }
    }
}

/// Keeps keys typed while a turn runs from being echoed into the answer:
/// the terminal stops echoing and stops collecting lines (so Enter stays a
/// carriage return), while still turning Ctrl-C into SIGINT. The keys wait
/// in the terminal's input queue; the line editor reads them afterwards, so
/// type-ahead shows up on the next prompt. Restored on drop (and by
/// [`restore_terminal`] before an exit from the Ctrl-C handler).
#[derive(Debug)]
pub struct TypeAhead {
    active: bool,
}

static SAVED_TERMIOS: Mutex<Option<nix::sys::termios::Termios>> = Mutex::new(None);

impl TypeAhead {
    /// Starts holding type-ahead back (a no-op when stdin is not a terminal,
    /// and when it is held already: a turn inside a slash command keeps the
    /// outer hold, whose drop puts the original settings back).
    pub fn hold() -> Self {
        use nix::sys::termios::{InputFlags, LocalFlags, SetArg, tcgetattr, tcsetattr};
        if !term().caps.in_tty || lock(&SAVED_TERMIOS).is_some() {
            return TypeAhead { active: false };
        }
        let stdin = std::io::stdin();
        let Ok(original) = tcgetattr(&stdin) else {
            return TypeAhead { active: false };
        };
        let mut quiet = original.clone();
        quiet
            .local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ICANON);
        quiet.input_flags.remove(InputFlags::ICRNL);
        let active = tcsetattr(&stdin, SetArg::TCSANOW, &quiet).is_ok();
        if active {
            *lock(&SAVED_TERMIOS) = Some(original);
        }
        TypeAhead { active }
    }
}

impl Drop for TypeAhead {
    fn drop(&mut self) {
        if self.active {
            restore_terminal();
        }
    }
}

/// Puts back the terminal settings [`TypeAhead::hold`] changed, if any.
pub fn restore_terminal() {
    use nix::sys::termios::{SetArg, tcsetattr};
    let saved = lock(&SAVED_TERMIOS).take();
    if let Some(original) = saved {
        let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &original);
    }
}

/// Reads a line from the terminal without echoing it (API keys in `hermes
/// setup`). Falls back to an echoed line when stdin is not a terminal.
pub fn read_secret(prompt: &str) -> std::io::Result<String> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let stdin = std::io::stdin();
    let saved = if term().caps.in_tty {
        tcgetattr(&stdin).ok()
    } else {
        None
    };
    if let Some(original) = &saved {
        let mut quiet = original.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &quiet);
    }
    let mut line = String::new();
    let read = stdin.read_line(&mut line);
    if let Some(original) = &saved {
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, original);
        eprintln!();
    }
    read?;
    Ok(line.trim().to_owned())
}
