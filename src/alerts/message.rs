//! What an alert says, built by pure functions: a [`Digest`] (what one message announces,
//! stored as the channel's pending message) and its renderings for Telegram (HTML), a
//! Slack-compatible webhook (`text` and `blocks`) and plain text.
//!
//! A digest holds counts, reasons, sources, case ids, connector names, thresholds and
//! times — nothing else exists in it to render, so no lead's data or key can reach a
//! message.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The longest text sent (Telegram's limit is 4096 characters; what a digest holds is
/// far shorter, this is a guard).
pub const MAX_TEXT: usize = 3500;

/// What one message announces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Digest {
    /// New review cases since the last group, if this message announces them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cases: Option<CaseGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Item>,
}

/// New review cases, grouped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseGroup {
    pub total: i64,
    /// `(reason, count)`, most first.
    pub by_reason: Vec<(String, i64)>,
    /// `(source, count)`, most first.
    pub by_source: Vec<(String, i64)>,
    /// The first case ids, oldest first; `total - ids.len()` more are not listed.
    pub ids: Vec<i64>,
}

/// Whether a condition started, still holds (a repeat) or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Fired,
    Still,
    Cleared,
}

/// A pause a person made (`leadgate connector pause`, the console): who and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandPause {
    pub by: String,
    pub reason: String,
}

/// One announced condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "alert", rename_all = "snake_case")]
pub enum Item {
    /// A connector is paused (`Cleared`: it was resumed).
    Connector {
        connector: String,
        phase: Phase,
        since: DateTime<Utc>,
        /// Who paused it by hand, and why (none: the worker, after an auth failure).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by_hand: Option<HandPause>,
    },
    /// Accepted deliveries without an operation (must be 0).
    Lost { phase: Phase, lost: i64 },
    /// Operations stale `in_progress` above the threshold.
    Stale {
        phase: Phase,
        count: i64,
        above: i64,
        stale_after_secs: u64,
    },
    /// An event-feed subscriber disabled after failing deliveries (`Cleared`: enabled
    /// again or its deliveries go through). Its id and the last error, never its URL.
    FeedSubscriber {
        subscriber: i64,
        phase: Phase,
        reason: Option<String>,
    },
    /// Deliveries waiting in the gateways' intake spools longer than the threshold: the
    /// operations database did not take them.
    Spooled {
        phase: Phase,
        count: i64,
        since: Option<DateTime<Utc>>,
        older_than_secs: u64,
    },
    /// Open review cases older than the threshold.
    ReviewAge {
        phase: Phase,
        count: i64,
        older_than_secs: u64,
        oldest: Option<DateTime<Utc>>,
    },
}

/// One paragraph: a headline and its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paragraph {
    pub headline: String,
    pub lines: Vec<String>,
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn duration(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

fn counts(pairs: &[(String, i64)]) -> String {
    pairs
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: i64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The digest as paragraphs, the renderings' common text.
pub fn paragraphs(d: &Digest) -> Vec<Paragraph> {
    let mut out = Vec::new();
    if let Some(c) = &d.cases {
        let mut lines = vec![
            format!("By reason: {}", counts(&c.by_reason)),
            format!("By source: {}", counts(&c.by_source)),
        ];
        let listed: Vec<String> = c.ids.iter().map(|id| format!("#{id}")).collect();
        let more = c.total - c.ids.len() as i64;
        lines.push(if more > 0 {
            format!("Cases: {} and {more} more", listed.join(", "))
        } else {
            format!("Cases: {}", listed.join(", "))
        });
        lines.push("Decide them in the console (Review tab).".into());
        out.push(Paragraph {
            headline: format!(
                "Leadgate: {}",
                plural(c.total, "new review case", "new review cases")
            ),
            lines,
        });
    }
    for item in &d.items {
        out.push(item_paragraph(item));
    }
    out
}

fn item_paragraph(item: &Item) -> Paragraph {
    let still = |p: Phase| if p == Phase::Still { " (still)" } else { "" };
    match item {
        Item::Connector {
            connector,
            phase: Phase::Cleared,
            since,
            ..
        } => Paragraph {
            headline: format!("Leadgate: connector {connector} resumed"),
            lines: vec![format!(
                "Resumed at {}: queued leads go to the CRM again.",
                time(*since)
            )],
        },
        Item::Connector {
            connector,
            phase,
            since,
            by_hand: Some(HandPause { by, reason }),
        } => Paragraph {
            headline: format!(
                "Leadgate: connector {connector} is paused by hand{}",
                still(*phase)
            ),
            lines: vec![
                format!("Paused since {} by {by}: {reason}", time(*since)),
                "Its leads queue: none goes to the CRM and no attempt is used until it is resumed.".into(),
                format!(
                    "When the work is done, run `leadgate connector resume {connector}` or resume it in the console's Connectors tab."
                ),
            ],
        },
        Item::Connector {
            connector,
            phase,
            since,
            by_hand: None,
        } => Paragraph {
            headline: format!("Leadgate: connector {connector} is paused{}", still(*phase)),
            lines: vec![
                format!(
                    "Paused since {}: no lead goes to the CRM until it is resumed.",
                    time(*since)
                ),
                format!(
                    "Fix the cause (usually the CRM credentials), then run `leadgate connector resume {connector}` or resume it in the console's Connectors tab."
                ),
            ],
        },
        Item::Lost {
            phase: Phase::Cleared,
            ..
        } => Paragraph {
            headline: "Leadgate: lost is back to 0".into(),
            lines: vec![],
        },
        Item::Lost { phase, lost } => Paragraph {
            headline: format!("Leadgate: lost = {lost}{}", still(*phase)),
            lines: vec![
                "Accepted deliveries without an operation: must be 0. Something wrote to the database behind the gateway's back; see docs/SPEC.md \"Metrics\".".into(),
            ],
        },
        Item::Stale {
            phase: Phase::Cleared,
            above,
            ..
        } => Paragraph {
            headline: format!("Leadgate: stale in_progress is back to {above} or fewer"),
            lines: vec![],
        },
        Item::Stale {
            phase,
            count,
            above,
            stale_after_secs,
        } => Paragraph {
            headline: format!(
                "Leadgate: {} stale in_progress{}",
                plural(*count, "operation", "operations"),
                still(*phase)
            ),
            lines: vec![format!(
                "In progress for longer than {} (threshold: more than {above}). A worker may have died or the CRM hangs; see the console's Stale tab.",
                duration(*stale_after_secs)
            )],
        },
        Item::FeedSubscriber {
            subscriber,
            phase: Phase::Cleared,
            ..
        } => Paragraph {
            headline: format!("Leadgate: event-feed subscriber #{subscriber} is active again"),
            lines: vec!["What it missed is being sent.".into()],
        },
        Item::FeedSubscriber {
            subscriber,
            phase,
            reason,
        } => Paragraph {
            headline: format!(
                "Leadgate: event-feed subscriber #{subscriber} is disabled{}",
                still(*phase)
            ),
            lines: vec![
                reason.clone().unwrap_or_default(),
                format!(
                    "Its events are kept. Fix the receiver, then run `leadgate feed enable {subscriber}`."
                ),
            ],
        },
        Item::Spooled {
            phase: Phase::Cleared,
            ..
        } => Paragraph {
            headline: "Leadgate: the gateways' spools are drained: every delivery they kept is recorded"
                .into(),
            lines: vec![],
        },
        Item::Spooled {
            phase,
            count,
            since,
            older_than_secs,
        } => {
            let mut lines = Vec::new();
            if let Some(t) = since {
                lines.push(format!("The oldest arrived at {}.", time(*t)));
            }
            lines.push(
                "The operations database did not take them; each is recorded as soon as it \
                 answers the gateway that kept it. Keep that gateway running, and look at the \
                 database (/metrics: leadgate_spool_records, leadgate_database_up)."
                    .into(),
            );
            Paragraph {
                headline: format!(
                    "Leadgate: {} waiting in a gateway's spool for more than {}{}",
                    plural(*count, "delivery", "deliveries"),
                    duration(*older_than_secs),
                    still(*phase)
                ),
                lines,
            }
        }
        Item::ReviewAge {
            phase: Phase::Cleared,
            older_than_secs,
            ..
        } => Paragraph {
            headline: format!(
                "Leadgate: no open review case is older than {} any more",
                duration(*older_than_secs)
            ),
            lines: vec![],
        },
        Item::ReviewAge {
            phase,
            count,
            older_than_secs,
            oldest,
        } => {
            let mut lines = Vec::new();
            if let Some(t) = oldest {
                lines.push(format!("The oldest was opened at {}.", time(*t)));
            }
            lines.push("Decide them in the console (Review tab).".into());
            Paragraph {
                headline: format!(
                    "Leadgate: {} older than {}{}",
                    plural(*count, "open review case", "open review cases"),
                    duration(*older_than_secs),
                    still(*phase)
                ),
                lines,
            }
        }
    }
}

fn cut(mut text: String) -> String {
    if text.chars().count() > MAX_TEXT {
        text = text.chars().take(MAX_TEXT - 1).collect();
        text.push('…');
    }
    text
}

/// Plain text: paragraphs separated by an empty line.
pub fn plain(d: &Digest) -> String {
    let text = paragraphs(d)
        .iter()
        .map(|p| {
            std::iter::once(p.headline.as_str())
                .chain(p.lines.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    cut(text)
}

/// `&`, `<` and `>` escaped, as Telegram's HTML and Slack's mrkdwn both want.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Telegram `parse_mode = "HTML"`: headlines bold, everything escaped.
pub fn telegram_html(d: &Digest) -> String {
    let text = paragraphs(d)
        .iter()
        .map(|p| {
            std::iter::once(format!("<b>{}</b>", escape(&p.headline)))
                .chain(p.lines.iter().map(|l| escape(l)))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    cut(text)
}

/// A Slack-compatible webhook body: `text` always (what clients without blocks show),
/// and with `blocks` a mrkdwn section per paragraph.
pub fn webhook_body(d: &Digest, blocks: bool) -> Value {
    let mut body = json!({ "text": plain(d) });
    if blocks {
        let sections: Vec<Value> = paragraphs(d)
            .iter()
            .map(|p| {
                let mut text = format!("*{}*", escape(&p.headline));
                for l in &p.lines {
                    text.push('\n');
                    text.push_str(&escape(l));
                }
                json!({"type": "section", "text": {"type": "mrkdwn", "text": cut(text)}})
            })
            .collect();
        body["blocks"] = Value::Array(sections);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        "2026-03-01T10:00:00Z".parse().unwrap()
    }

    fn group() -> Digest {
        Digest {
            cases: Some(CaseGroup {
                total: 30,
                by_reason: vec![
                    ("payload_conflict".into(), 20),
                    ("late_duplicate".into(), 10),
                ],
                by_source: vec![("site".into(), 25), ("chat".into(), 5)],
                ids: (1..=10).collect(),
            }),
            items: vec![],
        }
    }

    #[test]
    fn a_group_names_its_total_reasons_sources_and_first_ids() {
        let text = plain(&group());
        assert_eq!(
            text,
            "Leadgate: 30 new review cases\n\
             By reason: payload_conflict 20, late_duplicate 10\n\
             By source: site 25, chat 5\n\
             Cases: #1, #2, #3, #4, #5, #6, #7, #8, #9, #10 and 20 more\n\
             Decide them in the console (Review tab)."
        );
        let one = Digest {
            cases: Some(CaseGroup {
                total: 1,
                by_reason: vec![("uncertain_outcome".into(), 1)],
                by_source: vec![("tilda".into(), 1)],
                ids: vec![7],
            }),
            items: vec![],
        };
        assert!(plain(&one).starts_with("Leadgate: 1 new review case\n"));
        assert!(plain(&one).contains("Cases: #7\n"));
    }

    #[test]
    fn a_pause_by_hand_says_who_and_why() {
        let d = Digest {
            cases: None,
            items: vec![Item::Connector {
                connector: "bitrix24".into(),
                phase: Phase::Fired,
                since: at(),
                by_hand: Some(HandPause {
                    by: "cli:olga".into(),
                    reason: "the portal moves to a new plan until 22:00".into(),
                }),
            }],
        };
        let text = plain(&d);
        assert!(
            text.starts_with("Leadgate: connector bitrix24 is paused by hand\n"),
            "{text}"
        );
        assert!(
            text.contains("by cli:olga: the portal moves to a new plan until 22:00"),
            "{text}"
        );
        assert!(text.contains("no attempt is used"), "{text}");
        assert!(
            text.contains("`leadgate connector resume bitrix24`"),
            "{text}"
        );
        // An alert written before the field existed still reads.
        let old: Item = serde_json::from_value(serde_json::json!({"alert": "connector",
            "connector": "bitrix24", "phase": "fired", "since": "2026-03-01T10:00:00Z"}))
        .unwrap();
        assert!(matches!(old, Item::Connector { by_hand: None, .. }));
    }

    #[test]
    fn a_paused_connector_says_what_to_do() {
        let d = Digest {
            cases: None,
            items: vec![Item::Connector {
                connector: "bitrix24".into(),
                phase: Phase::Fired,
                since: at(),
                by_hand: None,
            }],
        };
        let text = plain(&d);
        assert!(
            text.starts_with("Leadgate: connector bitrix24 is paused\n"),
            "{text}"
        );
        assert!(
            text.contains("`leadgate connector resume bitrix24`"),
            "{text}"
        );
        assert!(text.contains("Connectors tab"), "{text}");
        assert!(text.contains("2026-03-01T10:00:00Z"), "{text}");
        let resumed = Digest {
            cases: None,
            items: vec![Item::Connector {
                connector: "bitrix24".into(),
                phase: Phase::Cleared,
                since: at(),
                by_hand: None,
            }],
        };
        assert!(plain(&resumed).starts_with("Leadgate: connector bitrix24 resumed"));
    }

    #[test]
    fn thresholds_name_the_figure_and_the_limit_and_say_when_they_clear() {
        let items = [
            (
                Item::Lost {
                    phase: Phase::Fired,
                    lost: 2,
                },
                "Leadgate: lost = 2\n",
            ),
            (
                Item::Stale {
                    phase: Phase::Still,
                    count: 7,
                    above: 5,
                    stale_after_secs: 120,
                },
                "Leadgate: 7 operations stale in_progress (still)\nIn progress for longer than 2m (threshold: more than 5)",
            ),
            (
                Item::ReviewAge {
                    phase: Phase::Fired,
                    count: 1,
                    older_than_secs: 4 * 3600,
                    oldest: Some(at()),
                },
                "Leadgate: 1 open review case older than 4h\nThe oldest was opened at 2026-03-01T10:00:00Z.",
            ),
            (
                Item::Stale {
                    phase: Phase::Cleared,
                    count: 0,
                    above: 5,
                    stale_after_secs: 120,
                },
                "Leadgate: stale in_progress is back to 5 or fewer",
            ),
            (
                Item::Spooled {
                    phase: Phase::Fired,
                    count: 12,
                    since: Some(at()),
                    older_than_secs: 300,
                },
                "Leadgate: 12 deliveries waiting in a gateway's spool for more than 5m\nThe oldest arrived at 2026-03-01T10:00:00Z.",
            ),
            (
                Item::Spooled {
                    phase: Phase::Cleared,
                    count: 0,
                    since: None,
                    older_than_secs: 300,
                },
                "Leadgate: the gateways' spools are drained",
            ),
            (
                Item::ReviewAge {
                    phase: Phase::Cleared,
                    count: 0,
                    older_than_secs: 60,
                    oldest: None,
                },
                "Leadgate: no open review case is older than 1m any more",
            ),
        ];
        for (item, expected) in items {
            let text = plain(&Digest {
                cases: None,
                items: vec![item],
            });
            assert!(text.starts_with(expected), "{text}");
        }
    }

    #[test]
    fn several_alerts_are_paragraphs_of_one_message() {
        let mut d = group();
        d.items.push(Item::Lost {
            phase: Phase::Fired,
            lost: 1,
        });
        let text = plain(&d);
        assert_eq!(text.matches("\n\n").count(), 1, "{text}");
        assert!(text.contains("\n\nLeadgate: lost = 1"), "{text}");
    }

    #[test]
    fn telegram_html_bolds_headlines_and_escapes_everything() {
        let d = Digest {
            cases: None,
            items: vec![Item::Connector {
                connector: "a<b>&c".into(),
                phase: Phase::Fired,
                since: at(),
                by_hand: None,
            }],
        };
        let html = telegram_html(&d);
        assert!(
            html.starts_with("<b>Leadgate: connector a&lt;b&gt;&amp;c is paused</b>\n"),
            "{html}"
        );
        let rest = html.trim_start_matches("<b>").replacen("</b>", "", 1);
        assert!(!rest.contains('<'), "only the bold tags are markup: {html}");
    }

    #[test]
    fn the_webhook_body_is_slack_text_with_optional_blocks() {
        let body = webhook_body(&group(), false);
        assert_eq!(body["text"], plain(&group()));
        assert!(body.get("blocks").is_none());
        let body = webhook_body(&group(), true);
        let blocks = body["blocks"].as_array().unwrap();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0]["type"], "section");
        assert!(blocks[0]["text"]["text"]
            .as_str()
            .unwrap()
            .starts_with("*Leadgate: 30 new review cases*\n"));
    }

    #[test]
    fn a_digest_survives_its_stored_form() {
        let mut d = group();
        d.items.push(Item::ReviewAge {
            phase: Phase::Still,
            count: 3,
            older_than_secs: 60,
            oldest: Some(at()),
        });
        let stored = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<Digest>(&stored).unwrap(), d);
    }

    #[test]
    fn text_is_cut_to_the_limit() {
        let d = Digest {
            cases: None,
            items: (0..200)
                .map(|i| Item::Connector {
                    connector: format!("connector-{i}"),
                    phase: Phase::Fired,
                    since: at(),
                    by_hand: None,
                })
                .collect(),
        };
        assert_eq!(plain(&d).chars().count(), MAX_TEXT);
        assert!(plain(&d).ends_with('…'));
    }
}
