//! The suite's media promises: a photo reaches vision, a voice note the model
//! as a transcript, `send_file` delivers a file.

use super::*;

pub(super) fn photo_reaches_vision<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.photo_in {
        return Verdict::NotApplicable("no photo reaches the gateway");
    }
    world.start();
    let token = world.token();
    let media = Media::Photo {
        png: PNG.to_vec(),
        caption: format!("{token} what is in this photo"),
    };
    let posted = world.harness.send_media(Sender::User(0), Place::Dm, &media);
    world.await_answer(&token, &posted);
    let request = world.request_for(&token).unwrap();
    let user = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .unwrap();
    let url = data_url("image/png", PNG);
    let parts = user["content"].as_array().cloned().unwrap_or_default();
    assert!(
        parts
            .iter()
            .any(|p| p["type"] == "image_url" && p["image_url"]["url"] == url.as_str()),
        "{}: the photo did not reach the model as an image: {user}",
        H::NAME
    );
    Verdict::Passed
}

pub(super) fn voice_reaches_model_as_transcript<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.voice_in {
        return Verdict::NotApplicable("no voice note reaches the gateway as audio");
    }
    world.start();
    let token = world.token();
    world
        .provider
        .set_transcription(Reply::text(format!("{token} spoken words")));
    let uploads = world.provider.transcriptions().len();
    let media = Media::Voice { ogg: OGG.to_vec() };
    let posted = world.harness.send_media(Sender::User(0), Place::Dm, &media);
    world.await_answer(&token, &posted);
    assert_eq!(
        world.provider.transcriptions().len(),
        uploads + 1,
        "{}: the voice note was not transcribed once",
        H::NAME
    );
    let text = last_user_text(&world.request_for(&token).unwrap());
    assert!(text.contains("spoken words"), "{}: {text:?}", H::NAME);
    Verdict::Passed
}

pub(super) fn send_file_delivers_a_file<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.file_out {
        return Verdict::NotApplicable("the adapter sends no files");
    }
    world.start();
    let mark = world.said_mark();
    let (token, posted) = world.ask(Sender::User(0), Place::Dm, &format!("{FILE} please"));
    world.await_answer(&token, &posted);
    let (path, content) = file_for(&token);
    let said = world.await_said(&mark, &posted.chat, "the file", |said| {
        said.iter().any(|s| s.file.is_some())
    });
    let files: Vec<&SentFile> = said.iter().filter_map(|s| s.file.as_ref()).collect();
    assert_eq!(files.len(), 1, "{}: {files:#?}", H::NAME);
    assert_eq!(files[0].name, path, "{}: the file's name", H::NAME);
    assert_eq!(
        files[0].bytes,
        content.as_bytes(),
        "{}: the file's bytes",
        H::NAME
    );
    Verdict::Passed
}
