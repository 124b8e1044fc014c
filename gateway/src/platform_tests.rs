//! The registry against every list that names platforms: a platform
//! missing from one of them fails here, naming the list.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hermes_runtime::config::{Keys, Kind, SECTIONS, check_file};
use hermes_runtime::cron::settings::HOME_CHANNEL_VARS;
use hermes_runtime::env::{KNOWN_VARS, is_hermes_credential};

use super::*;

/// Every platform feature is on: the lists can be compared whole.
const ALL_PLATFORMS: bool = cfg!(all(
    feature = "telegram",
    feature = "wecom",
    feature = "discord",
    feature = "wecom_callback",
    feature = "matrix",
    feature = "email",
    feature = "signal",
    feature = "whatsapp",
    feature = "slack",
    feature = "api_server"
));

#[test]
fn names_are_unique_and_each_platform_is_a_cargo_feature() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let mut names = BTreeSet::new();
    for p in platforms() {
        assert!(names.insert(p.name), "{} is registered twice", p.name);
        assert!(!p.display_name.is_empty(), "{} has no display name", p.name);
        assert!(
            manifest.contains(&format!("\n{} = [", p.feature)),
            "{}: no cargo feature `{}` in gateway/Cargo.toml",
            p.name,
            p.feature
        );
    }
    if ALL_PLATFORMS {
        assert_eq!(platforms().len(), 10);
    }
}

#[test]
fn every_variable_of_a_platform_is_a_known_variable_and_its_secrets_are_credentials() {
    for p in platforms() {
        for v in p.vars {
            assert!(
                KNOWN_VARS.contains(&v.name),
                "{}: {} is missing from hermes_runtime::env::KNOWN_VARS (a .env typo check \
                 and the sandbox's credential filter read that list)",
                p.name,
                v.name
            );
            if v.secret {
                assert!(
                    is_hermes_credential(v.name),
                    "{}: the secret {} would not be kept from the terminal's commands",
                    p.name,
                    v.name
                );
            }
        }
        let own = |name: &str| p.vars.iter().any(|v| v.name == name);
        for name in p.allow_var.iter().chain(&p.home_channel_var) {
            assert!(own(name), "{}: {name} is not among its vars", p.name);
        }
        if let Some(setup) = p.setup {
            // What setup asks first is one of the platform's own vars, read
            // hidden exactly when that var is a credential.
            let token = p.vars.iter().find(|v| v.name == setup.token_var);
            assert!(
                token.is_some_and(|v| v.secret == setup.token_secret),
                "{}: the setup token {} is not a var of its own whose secret flag is \
                 the setup hint's token_secret ({})",
                p.name,
                setup.token_var,
                setup.token_secret
            );
            assert!(
                p.allow_var.is_some(),
                "{}: setup needs an allow-list",
                p.name
            );
            for (var, _) in setup.more {
                assert!(
                    p.vars.contains(var),
                    "{}: setup asks for {}, which is not one of its vars as declared",
                    p.name,
                    var.name
                );
            }
        }
    }
}

#[test]
fn every_known_platform_variable_belongs_to_a_descriptor() {
    if !ALL_PLATFORMS {
        return;
    }
    let ours: BTreeSet<&str> = platforms()
        .iter()
        .flat_map(|p| p.vars.iter().map(|v| v.name))
        .collect();
    let prefixes: BTreeSet<&str> = ours
        .iter()
        .map(|name| &name[..=name.find('_').unwrap()])
        .collect();
    for name in KNOWN_VARS {
        if prefixes.iter().any(|p| name.starts_with(p)) {
            assert!(
                ours.contains(name),
                "{name} is in KNOWN_VARS but in no platform's descriptor"
            );
        }
    }
}

/// A value `check_file` accepts for `kind`.
fn sample(kind: Kind) -> toml::Value {
    match kind {
        Kind::Str => "x".into(),
        Kind::Url => "https://example.org".into(),
        Kind::PositiveInt | Kind::Int | Kind::Amount => 1.into(),
        Kind::Bool => true.into(),
        Kind::List => toml::Value::Array(vec!["1".into()]),
        Kind::ListOf(names) | Kind::OneOf(names) => names[0].into(),
        Kind::Tables | Kind::TableOrOff => toml::Value::Table(toml::Table::new()),
    }
}

#[test]
fn every_section_of_a_platform_is_validated_as_it_describes_it() {
    let mut sections = BTreeSet::new();
    for p in platforms() {
        let Some(section) = &p.section else { continue };
        sections.insert(section.name);
        let Keys::These(keys) = section.keys else {
            panic!("{}: a platform's section lists its keys", p.name);
        };
        let runtime = SECTIONS
            .iter()
            .find(|s| s.name == section.name)
            .unwrap_or_else(|| {
                panic!(
                    "[{}] is missing from hermes_runtime::config::SECTIONS",
                    section.name
                )
            });
        let Keys::These(runtime_keys) = runtime.keys else {
            panic!("[{}] is not checked key by key", section.name);
        };
        let pairs = |keys: &[hermes_runtime::config::Key]| -> BTreeSet<(&str, String)> {
            keys.iter()
                .map(|k| (k.name, format!("{:?}", k.kind)))
                .collect()
        };
        assert_eq!(
            pairs(keys),
            pairs(runtime_keys),
            "[{}]: the descriptor and SECTIONS differ",
            section.name
        );
        let mut table = toml::Table::new();
        let body: toml::Table = keys
            .iter()
            .map(|k| (k.name.to_owned(), sample(k.kind)))
            .collect();
        table.insert(section.name.to_owned(), body.into());
        let problems = check_file(&table, Path::new("config.toml"));
        assert!(problems.is_empty(), "[{}]: {problems:?}", section.name);
        let typo: toml::Table =
            toml::from_str(&format!("[{}]\nno_such_key = 1\n", section.name)).unwrap();
        assert_eq!(check_file(&typo, Path::new("config.toml")).len(), 1);
    }
    if ALL_PLATFORMS {
        let known: BTreeSet<&str> = [
            "discord",
            "signal",
            "email",
            "whatsapp",
            "slack",
            "api_server",
        ]
        .into();
        assert_eq!(sections, known);
    }
}

#[test]
fn every_home_channel_is_the_schedulers() {
    for p in platforms() {
        let runtime = HOME_CHANNEL_VARS
            .iter()
            .find(|(name, _)| *name == p.name)
            .map(|(_, var)| *var);
        assert_eq!(
            runtime, p.home_channel_var,
            "{}: hermes_runtime::cron::settings::HOME_CHANNEL_VARS and the descriptor differ",
            p.name
        );
    }
    if ALL_PLATFORMS {
        for (name, _) in HOME_CHANNEL_VARS {
            assert!(
                find(name).is_some(),
                "home channel of unknown platform {name}"
            );
        }
    }
}

#[test]
fn delivery_targets_split_as_the_runtime_reads_them() {
    let samples = [
        "-100123",
        "-100123:77",
        "!room:example.org",
        "!room:example.org:$event",
        "ops:a:b",
        "a@example.org",
    ];
    for p in platforms() {
        for s in samples {
            assert_eq!(
                (p.split_target)(s),
                hermes_runtime::cron::target::split_chat(p.name, s),
                "{}: {s}",
                p.name
            );
            assert_eq!(split_target(p.name, s), (p.split_target)(s));
        }
    }
}

#[test]
fn the_enabling_text_and_the_allow_list_warning_name_every_platform() {
    let none = no_platform_text();
    let warning = crate::check::describe_allow(&crate::config::AllowList::default());
    for p in platforms() {
        assert!(!p.enable_hint.is_empty(), "{}: no enable hint", p.name);
        assert!(none.contains(p.enable_hint), "{}: {none}", p.name);
        if let Some(var) = p.allow_var {
            assert!(warning.contains(var), "{}: {warning}", p.name);
        }
        assert!(
            p.build.is_some() || p.name == "api_server",
            "{}: a chat platform builds an adapter (and so has a live check)",
            p.name
        );
        assert_eq!(display_name(p.name), p.display_name);
    }
    if ALL_PLATFORMS {
        assert_eq!(
            none,
            "no platform is enabled: set TELEGRAM_BOT_TOKEN, or WECOM_BOT_ID and WECOM_SECRET, \
             or DISCORD_BOT_TOKEN, or the WECOM_CALLBACK_* settings of a self-built app, or \
             MATRIX_HOMESERVER with MATRIX_ACCESS_TOKEN or MATRIX_USER_ID and MATRIX_PASSWORD, \
             or SIGNAL_HTTP_URL and SIGNAL_ACCOUNT, or EMAIL_ADDRESS with EMAIL_PASSWORD, EMAIL_IMAP_HOST and EMAIL_SMTP_HOST, or \
             WHATSAPP_ACCESS_TOKEN with WHATSAPP_PHONE_NUMBER_ID, WHATSAPP_APP_SECRET and \
             WHATSAPP_VERIFY_TOKEN, or SLACK_BOT_TOKEN and SLACK_APP_TOKEN, or API_SERVER_ENABLED=true and API_SERVER_KEY (environment or $HERMES_HOME/.env)"
        );
    }
}

#[test]
fn the_books_platform_table_has_a_row_for_every_platform() {
    let page = book("gateway.md");
    for p in platforms() {
        let row = page
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` ", p.name)))
            .unwrap_or_else(|| {
                panic!(
                    "docs/src/gateway.md's platform table has no row for `{}`",
                    p.name
                )
            });
        assert!(row.contains(&format!("`{}`", p.feature)), "{row}");
        for word in p
            .enable_hint
            .split(|c: char| !(c.is_ascii_uppercase() || c == '_' || c == '*'))
        {
            if word.len() > 3 {
                assert!(
                    row.contains(word),
                    "docs/src/gateway.md's `{}` row lacks {word}: {row}",
                    p.name
                );
            }
        }
        if let Some(home) = p.home_channel_var {
            assert!(
                row.contains(home),
                "docs/src/gateway.md's `{}` row lacks {home}",
                p.name
            );
        }
    }
}

/// Every platform has its page in the book (issue 40 §4), listed in the
/// book's contents, and the page names every variable its descriptor
/// declares: a platform cannot land, or gain a setting, undocumented.
#[test]
fn every_platform_has_a_book_page_naming_each_of_its_variables() {
    let summary = book("SUMMARY.md");
    for p in platforms() {
        let name = format!("platforms/{}.md", p.name);
        assert!(
            summary.contains(&format!("]({name})")),
            "docs/src/SUMMARY.md does not list {name}"
        );
        let page = book(&name);
        for v in p.vars {
            assert!(
                page.contains(v.name),
                "docs/src/{name} does not name {}, a variable of {}",
                v.name,
                p.name
            );
        }
    }
}

/// A page of the book (`docs/src/`).
fn book(page: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/src")
        .join(page);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `.rs` files under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `code` names module `module` through one of `roots`
/// (`crate::api_server::…`, `hermes_gateway::api_server`).
fn names_module(code: &str, roots: &[&str], module: &str) -> bool {
    roots.iter().any(|root| {
        let needle = format!("{root}::{module}");
        code.match_indices(&needle).any(|(at, _)| {
            let after = code[at + needle.len()..].chars().next();
            !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn only_the_registry_names_a_platform_module() {
    const MODULES: &[&str] = &["api_server"];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The platform crates (`platforms/NAME`), as code spells them.
    let crates: Vec<String> = std::fs::read_dir(root.join("platforms"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path().join("Cargo.toml")).ok())
        .map(|m| {
            let m: toml::Table = toml::from_str(&m).unwrap();
            m["package"]["name"].as_str().unwrap().replace('-', "_")
        })
        .collect();
    assert!(crates.len() >= 9, "the platform crates: {crates:?}");
    let mut files = Vec::new();
    sources(&root.join("gateway/src"), &mut files);
    sources(&root.join("cli/src"), &mut files);
    let mut offenders = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let inside = |m: &str| rel.starts_with(&format!("gateway/src/{m}/"));
        // The registry; the fuzz targets reach into the parsers on purpose;
        // the app (`app`, `wiring`) binds the API server beside the runner
        // (it is no chat adapter).
        if rel == "gateway/src/platform.rs" || rel == "gateway/src/fuzz_entry.rs" {
            continue;
        }
        let code: String = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for module in MODULES {
            let the_app = rel == "gateway/src/app.rs" || rel == "gateway/src/wiring.rs";
            if inside(module) || (*module == "api_server" && the_app) {
                continue;
            }
            if names_module(&code, &["crate", "hermes_gateway", "super"], module) {
                offenders.push(format!("{rel} names {module}"));
            }
        }
        for name in &crates {
            let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
            let named = code.match_indices(name.as_str()).any(|(at, _)| {
                !code[..at].ends_with(word) && !code[at + name.len()..].starts_with(word)
            });
            if named {
                offenders.push(format!("{rel} names {name}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "only the platform modules and the registry (gateway/src/platform.rs) may name a \
         platform's module or crate:\n{}",
        offenders.join("\n")
    );
}

#[test]
#[cfg(all(feature = "discord", feature = "email"))]
fn a_platforms_own_allow_list_from_its_section_or_variable() {
    // The runner reads a platform's `[section] allowed_users` through the
    // descriptors the app hands it (`GatewayConfig::from_sources`).
    let parse = |toml_src: &str, env: &[(&str, &str)]| {
        let file: toml::Table = toml_src.parse().unwrap();
        let env: std::collections::BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        crate::config::GatewayConfig::from_sources(&file, &env, platforms())
    };
    let cfg = parse("[email]\nallowed_users = [\"a@example.org\"]", &[]).unwrap();
    assert!(cfg.allow.allows("email", "a@example.org"));
    let cfg = parse("[discord]\nallowed_users = [\"111\", 222]", &[]).unwrap();
    assert!(cfg.allow.allows("discord", "111") && cfg.allow.allows("discord", "222"));
    assert!(!cfg.allow.allows("telegram", "111"));
    let cfg = parse(
        "[discord]\nallowed_users = [\"111\"]",
        &[("DISCORD_ALLOWED_USERS", "333")],
    )
    .unwrap();
    assert!(cfg.allow.allows("discord", "333") && !cfg.allow.allows("discord", "111"));
}
