//! Filters give EventBridge's answers: every case in `filter_corpus.json` comes from AWS's
//! published expectations (the `aws/event-ruler` library's tests and README, EventBridge's
//! user guide), each citing its source. A case is a pattern and either the events it
//! matches and does not match (empty lists: only that the pattern is accepted), or
//! `refused`: a part of the reason Sluice must give, with `why` (EventBridge refuses it
//! too, or Sluice does not support it). A refused pattern is never answered differently.

use serde::Deserialize;
use serde_json::Value;
use sluice_core::filter::Filter;

/// One group of the corpus.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    source: String,
    pattern: Value,
    #[serde(default)]
    note: Option<String>,
    #[serde(default, rename = "match")]
    matching: Vec<Value>,
    #[serde(default)]
    no_match: Vec<Value>,
    #[serde(default)]
    refused: Option<String>,
    #[serde(default)]
    why: Option<String>,
}

fn corpus() -> Vec<Case> {
    serde_json::from_str(include_str!("filter_corpus.json")).expect("filter_corpus.json parses")
}

/// Every disagreement of one case, empty when Sluice answers as EventBridge does.
fn disagreements(case: &Case) -> Vec<String> {
    let pattern = &case.pattern;
    let compiled = Filter::parse(pattern);
    match (&case.refused, compiled) {
        (Some(reason), Ok(_)) => vec![format!("{pattern} was accepted; it must be refused ({reason})")],
        (Some(reason), Err(got)) if !got.contains(reason.as_str()) => {
            vec![format!("{pattern} was refused with {got:?}, not for {reason:?}")]
        }
        (Some(_), Err(_)) => Vec::new(),
        (None, Err(got)) => vec![format!("{pattern} was refused: {got}")],
        (None, Ok(filter)) => {
            let wrong = |events: &[Value], expected: bool| {
                events
                    .iter()
                    .filter(|event| filter.matches(event) != expected)
                    .map(|event| format!("{pattern} on {event}: matched {}, EventBridge {expected}", !expected))
                    .collect::<Vec<_>>()
            };
            let mut out = wrong(&case.matching, true);
            out.extend(wrong(&case.no_match, false));
            out
        }
    }
}

#[test]
fn every_case_gets_eventbridges_answer() {
    let cases = corpus();
    let failures: Vec<String> = cases
        .iter()
        .flat_map(|case| disagreements(case).into_iter().map(move |d| format!("{}:\n  {d}", case.source)))
        .collect();
    let pairs: usize = cases.iter().map(|c| c.matching.len() + c.no_match.len()).sum();
    let refusals = cases.iter().filter(|c| c.refused.is_some()).count();
    println!("{} patterns: {pairs} pattern-event answers, {refusals} refusals", cases.len());
    assert!(failures.is_empty(), "{} disagreements with EventBridge:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_case_names_its_source_and_says_why_a_refusal_is_one() {
    for case in corpus() {
        let cited = case.source.starts_with("aws/event-ruler ") || case.source.starts_with("EventBridge user guide, ");
        assert!(cited, "{}: cite aws/event-ruler or the EventBridge user guide", case.source);
        assert_eq!(case.refused.is_some(), case.why.is_some(), "{}: a refusal, and only one, says why", case.source);
        let answers = !case.matching.is_empty() || !case.no_match.is_empty();
        assert!(!(answers && case.refused.is_some()), "{}: a refused pattern has no answers", case.source);
        assert!(case.note.as_deref().is_none_or(|n| !n.is_empty()), "{}: an empty note", case.source);
    }
}
