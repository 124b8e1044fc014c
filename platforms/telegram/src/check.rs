//! What `hermes gateway run --check` verifies beyond what starting the
//! adapter needs: the token looks like one BotFather issues, and the
//! allow-list holds numeric user ids (Telegram identifies users by number;
//! a `@username` there would never match anyone).

/// Problems with the Telegram settings in `env`, one sentence each; empty
/// when Telegram is not enabled or all is well.
pub fn check_env(env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let Some(token) = env("TELEGRAM_BOT_TOKEN").filter(|t| !t.trim().is_empty()) else {
        return Vec::new();
    };
    let mut problems: Vec<String> = token_problem(&token).into_iter().collect();
    problems.extend(allow_list_problems(env));
    problems
}

/// Why `token` does not look like a token BotFather issues, if it does not:
/// a hint beside Telegram's refusal of it.
pub fn token_problem(token: &str) -> Option<String> {
    (!token_shape_ok(token.trim())).then(|| {
        "TELEGRAM_BOT_TOKEN does not look like a bot token (BotFather gives `<bot id>:<35 letters, digits, - or _>`, e.g. 123456789:AAH…)"
            .to_owned()
    })
}

/// Entries of `TELEGRAM_ALLOWED_USERS` that can never match a user.
pub fn allow_list_problems(env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(list) = env("TELEGRAM_ALLOWED_USERS") {
        for id in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if !id.chars().all(|c| c.is_ascii_digit()) {
                problems.push(format!(
                    "TELEGRAM_ALLOWED_USERS entry {id:?} is not a numeric user id (Telegram allow-lists take ids such as 123456789; @userinfobot tells a user theirs)"
                ));
            }
        }
    }
    problems
}

fn token_shape_ok(token: &str) -> bool {
    let Some((id, secret)) = token.split_once(':') else {
        return false;
    };
    !id.is_empty()
        && id.chars().all(|c| c.is_ascii_digit())
        && secret.len() >= 30
        && secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pairs: &[(&str, &str)]) -> Vec<String> {
        let env = |k: &str| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        };
        check_env(&env)
    }

    #[test]
    fn token_and_allow_list_shapes() {
        let good = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0";
        assert!(
            check(&[
                ("TELEGRAM_BOT_TOKEN", good),
                ("TELEGRAM_ALLOWED_USERS", "1, 22")
            ])
            .is_empty()
        );
        assert_eq!(check(&[("TELEGRAM_BOT_TOKEN", "123:abc")]).len(), 1);
        let p = check(&[
            ("TELEGRAM_BOT_TOKEN", good),
            ("TELEGRAM_ALLOWED_USERS", "1,@bob"),
        ]);
        assert!(p.len() == 1 && p[0].contains("@bob"), "{p:?}");
        assert!(check(&[]).is_empty(), "Telegram off: nothing to check");
    }
}
