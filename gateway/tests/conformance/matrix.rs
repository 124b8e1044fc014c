//! Matrix's harness: a real Synapse on loopback (`hermes_tests::synapse`,
//! rate limits relaxed). Each user has a DM room with the bot, which the
//! first gateway joins on their invites; the group is one room of all users
//! and the bot, where no mention is needed (`MATRIX_REQUIRE_MENTION=false`);
//! the home room is a room of its own. What the bot sent is read back with
//! `/messages` as the room's members.

use std::time::{Duration, Instant};

use hermes_tests::synapse::{self, User};
use serde_json::json;

use crate::conformance_kit::{
    Access, Capabilities, Capability, Harness, Media, Place, Plan, Posted, Said, Sender,
};

pub struct Matrix {
    bot: User,
    /// Each user and their DM room with the bot.
    users: Vec<(User, String)>,
    stranger: (User, String),
    group: String,
    home: String,
    /// Thread k's root event in the group.
    roots: std::collections::HashMap<usize, String>,
}

impl Matrix {
    /// Every room the suite reads and a member who can read it.
    fn rooms(&self) -> Vec<(&User, &str)> {
        let mut rooms: Vec<(&User, &str)> =
            self.users.iter().map(|(u, r)| (u, r.as_str())).collect();
        rooms.push((&self.stranger.0, &self.stranger.1));
        rooms.push((&self.users[0].0, &self.group));
        rooms.push((&self.users[0].0, &self.home));
        rooms
    }
}

impl Harness for Matrix {
    const NAME: &'static str = "matrix";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: 3,
            groups: true,
            threads: true,
            answers_while_down: true,
            replies_point_back: true,
            // The adapter splits bodies at 16 KiB (`MAX_BODY_BYTES`; Synapse
            // takes events up to 64 KiB).
            reply_limit: Some(16 * 1024),
            rate_limit: true,
            access: Access::AllowList,
            photo_in: true,
            voice_in: true,
            file_out: false,
            home_channel: true,
        }
    }

    /// Synapse's own 429s need more of
    /// the real server than the harness drives yet.
    fn uncovered() -> &'static [Capability] {
        &[Capability::RateLimit]
    }

    fn soak_plan() -> Plan {
        Plan {
            rounds: 12,
            users: 3,
            // From the second round on: the first sync of a new login
            // answers no history, by design.
            while_down: 2,
            down_in_first_round: false,
            // Written while the gateway logs in and syncs (after the first
            // round, up only means the rooms are joined: no real wait).
            while_up: 2,
            first_round_extra: (1, Duration::from_millis(500)),
            kill_within: Duration::from_millis(1500),
            graceful_every: 5,
            before_last: 2,
            settle: Duration::from_secs(1),
        }
    }

    fn needs() -> &'static [hermes_tests::tier::Component] {
        use hermes_tests::tier::Component;
        &[Component::Synapse]
    }

    fn start(_: &tokio::runtime::Runtime) -> Self {
        let server = synapse::server();
        let bot = server.user("bot");
        let users: Vec<(User, String)> = (0..3)
            .map(|_| {
                let user = server.user("member");
                let room = user.create_room(&[&bot.user_id], true);
                (user, room)
            })
            .collect();
        let stranger = server.user("stranger");
        let stranger_room = stranger.create_room(&[&bot.user_id], true);
        let mut invited: Vec<&str> = users
            .iter()
            .skip(1)
            .map(|(u, _)| u.user_id.as_str())
            .collect();
        invited.push(&bot.user_id);
        let group = users[0].0.create_room(&invited, false);
        for (user, _) in users.iter().skip(1) {
            user.join(&group);
        }
        let home = users[0].0.create_room(&[&bot.user_id], false);
        Matrix {
            bot,
            users,
            stranger: (stranger, stranger_room),
            group,
            home,
            roots: std::collections::HashMap::new(),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let allowed: Vec<&str> = self.users.iter().map(|(u, _)| u.user_id.as_str()).collect();
        vec![
            ("MATRIX_HOMESERVER", synapse::server().base.clone()),
            ("MATRIX_USER_ID", self.bot.user_id.clone()),
            ("MATRIX_PASSWORD", self.bot.password.clone()),
            ("MATRIX_ALLOWED_USERS", allowed.join(",")),
            ("MATRIX_REQUIRE_MENTION", "false".to_owned()),
            ("MATRIX_HOME_ROOM", self.home.clone()),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        let (user, dm) = match from {
            Sender::User(n) => (&self.users[n].0, &self.users[n].1),
            Sender::Stranger => (&self.stranger.0, &self.stranger.1),
        };
        let room = match place {
            Place::Dm => dm.clone(),
            Place::Group | Place::Thread(_) => self.group.clone(),
        };
        let Place::Thread(k) = place else {
            return Posted {
                id: user.say(&room, text),
                chat: room,
            };
        };
        // A thread hangs off a root event in the group (a notice, which the
        // bot does not answer), as Element starts one.
        let root = self
            .roots
            .entry(k)
            .or_insert_with(|| {
                user.send(
                    &room,
                    json!({"msgtype": "m.notice", "body": format!("thread {k}")}),
                )
            })
            .clone();
        let id = user.send(
            &room,
            json!({"msgtype": "m.text", "body": text,
                "m.relates_to": {"rel_type": "m.thread", "event_id": root,
                    "is_falling_back": true, "m.in_reply_to": {"event_id": root}}}),
        );
        Posted { id, chat: room }
    }

    /// The file goes to Synapse's media repository first (as a client
    /// uploads it), then an `m.image` or a voice `m.audio` names its
    /// `mxc://` URL.
    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        assert_eq!(place, Place::Dm, "matrix's harness sends media in DMs");
        let (user, room) = match from {
            Sender::User(n) => (&self.users[n].0, &self.users[n].1),
            Sender::Stranger => (&self.stranger.0, &self.stranger.1),
        };
        let content = match media {
            Media::Photo { png, caption } => {
                let url = upload(user, "image/png", "photo.png", png);
                json!({"msgtype": "m.image", "body": caption, "filename": "photo.png", "url": url,
                    "info": {"mimetype": "image/png", "size": png.len()}})
            }
            Media::Voice { ogg } => {
                let url = upload(user, "audio/ogg", "voice.ogg", ogg);
                json!({"msgtype": "m.audio", "body": "Voice message", "url": url,
                    "info": {"mimetype": "audio/ogg", "size": ogg.len()},
                    "org.matrix.msc3245.voice": {}, "org.matrix.msc1767.audio": {"duration": 1000}})
            }
        };
        Posted {
            id: user.send(room, content),
            chat: room.clone(),
        }
    }

    fn said(&self) -> Vec<Said> {
        let mut said = Vec::new();
        for (reader, room) in self.rooms() {
            for event in reader.messages(room) {
                if event["sender"] != self.bot.user_id.as_str() || event["type"] != "m.room.message"
                {
                    continue;
                }
                let content = &event["content"];
                said.push((
                    event["origin_server_ts"].as_u64().unwrap_or(0),
                    Said {
                        chat: room.to_owned(),
                        reply_to: content["m.relates_to"]["m.in_reply_to"]["event_id"]
                            .as_str()
                            .map(str::to_owned),
                        text: content["body"].as_str().unwrap_or_default().to_owned(),
                        file: None,
                    },
                ));
            }
        }
        said.sort_by_key(|(ts, _)| *ts);
        said.into_iter().map(|(_, s)| s).collect()
    }

    fn mark(&self) -> usize {
        0
    }

    /// Once the bot has joined every room, a gateway sees whatever is
    /// written next: the first gateway joins during its first sync, whose
    /// position it stores right after, and later gateways resume from the
    /// stored position.
    fn wait_up(&self, _: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self
            .rooms()
            .iter()
            .filter(|(u, _)| u.user_id != self.stranger.0.user_id)
            .all(|(user, room)| user.joined(room).contains(&self.bot.user_id))
        {
            assert!(Instant::now() < deadline, "the bot never joined the rooms");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn home_chat(&self) -> String {
        self.home.clone()
    }
}

/// Uploads `bytes` to Synapse's media repository as `user`; the `mxc://`
/// URL.
fn upload(user: &User, mime: &str, name: &str, bytes: &[u8]) -> String {
    let url = format!(
        "{}/_matrix/media/v3/upload?filename={name}",
        synapse::server().base
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut answer = agent
        .post(&url)
        .header("authorization", format!("Bearer {}", user.token))
        .header("content-type", mime)
        .send(bytes)
        .unwrap();
    let body: serde_json::Value = answer.body_mut().read_json().unwrap();
    body["content_uri"]
        .as_str()
        .unwrap_or_else(|| panic!("upload refused: {body}"))
        .to_owned()
}
