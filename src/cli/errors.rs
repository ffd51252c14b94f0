//! How a client verb's error is told: one line `error: …` saying what went wrong where,
//! and, where one exists, a `hint: …` line saying what to do about it.

use sluice_client::Error;

/// The `error:` line and the `hint:` line, if any, for `error` from the Sluice at `url`.
pub fn describe(error: &Error, url: &str) -> (String, Option<String>) {
    match error {
        Error::Api { status, code, message, .. } => {
            (format!("error: {code} ({status}): {message}"), api_hint(code).map(|h| format!("hint: {h}")))
        }
        Error::Unexpected { status, content_type, .. } => {
            let kind = content_type
                .as_deref()
                .map_or("no content type".to_owned(), |t| t.split(';').next().unwrap_or(t).trim().to_owned());
            (
                format!("error: {url} answered {status} ({kind}), which is not an answer of the Sluice API"),
                Some(
                    "hint: check --url (or SLUICE_URL): it should be `sluice serve`'s address or a deployment's \
                     API URL"
                        .to_owned(),
                ),
            )
        }
        Error::Transport(e) if e.is_connect() => (
            format!("error: could not connect to {url}: {}", root_cause(e.as_ref())),
            Some("hint: start a server with `sluice serve`, or point --url (or SLUICE_URL) at a running Sluice".into()),
        ),
        Error::Transport(e) if e.is_timeout() => (
            format!("error: {url} did not answer in time"),
            Some("hint: check that --url (or SLUICE_URL) is a Sluice and that it is not overloaded".into()),
        ),
        Error::Transport(e) => (format!("error: a request to {url} failed: {}", root_cause(e.as_ref())), None),
        Error::Signing(reason) => (
            format!("error: could not sign the request with AWS credentials: {reason}"),
            Some("hint: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and AWS_REGION".into()),
        ),
        Error::Invalid(reason) => (format!("error: {reason}"), None),
        Error::Closed => ("error: the client was closed while waiting for an answer".into(), None),
    }
}

/// What to try after an API error with this code, for the codes a user can act on.
fn api_hint(code: &str) -> Option<&'static str> {
    Some(match code {
        "topic_not_found" => "`sluice topics list` shows the topics; `sluice topics create NAME` makes one",
        "subscription_not_found" => "`sluice subs list TOPIC` shows a topic's subscriptions",
        "group_not_found" => "`sluice groups list` shows the groups",
        "topic_exists" | "subscription_exists" => "it exists with other settings: describe it, or pick another name",
        "dead_letter_not_found" => "`sluice dlq list TOPIC SUB` shows the dead letters and their ids",
        "group_not_empty" => "stop its members first; a member that went away leaves at its session timeout",
        "push_subscription" => "a push subscription delivers by itself: receive from a pull subscription",
        "not_found" => "this server does not have that route: is --url a Sluice of this version?",
        "offset_out_of_range" => "`sluice topics describe TOPIC` shows each partition's log start and high watermark",
        "throttled" | "unavailable" => "the server is busy: try again in a moment",
        _ => return None,
    })
}

/// The innermost cause of a transport error, which says what happened ("Connection
/// refused (os error 111)") where reqwest's own message says only "error sending request".
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// `--url` as the client takes it: a scheme-less `host:port` gets `http://`, a trailing
/// slash goes; a scheme other than HTTP's is refused with what to write instead.
pub fn complete_url(url: &str) -> Result<String, Error> {
    let url = url.trim().trim_end_matches('/');
    if url.is_empty() {
        return Err(Error::Invalid("--url is empty: give the address of a Sluice, e.g. http://127.0.0.1:8080".into()));
    }
    match url.split_once("://") {
        None => Ok(format!("http://{url}")),
        Some(("http" | "https", _)) => Ok(url.to_owned()),
        Some((scheme, rest)) => Err(Error::Invalid(format!(
            "--url {url}: the scheme must be http or https, not {scheme} (e.g. http://{rest})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_url_without_a_scheme_then_http_is_assumed_and_other_schemes_are_refused() {
        assert_eq!(complete_url("localhost:18473").unwrap(), "http://localhost:18473");
        assert_eq!(complete_url("https://x.example/prod/").unwrap(), "https://x.example/prod");
        assert_eq!(complete_url("http://127.0.0.1:8080").unwrap(), "http://127.0.0.1:8080");
        let refused = complete_url("ftp://host:21").unwrap_err().to_string();
        assert!(refused.contains("http or https") && refused.contains("http://host:21"), "{refused}");
        assert!(complete_url(" ").is_err());
    }

    #[test]
    fn given_a_non_sluice_answer_then_its_status_and_type_are_told_without_its_body() {
        let error = Error::Unexpected {
            status: 404,
            content_type: Some("text/html; charset=utf-8".into()),
            body: "<html><body>Not Found</body></html>".into(),
        };
        let (line, hint) = describe(&error, "http://127.0.0.1:9");
        assert_eq!(
            line,
            "error: http://127.0.0.1:9 answered 404 (text/html), which is not an answer of the Sluice API"
        );
        assert!(hint.unwrap().starts_with("hint: check --url"));
    }
}
