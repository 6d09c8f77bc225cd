//! The diagnosis as a manager reads it: totals per verdict and per source, the top
//! causes, and for each pair its verdict, evidence and merged timeline — as one
//! self-contained HTML file (no scripts, no external resources) and as Markdown for
//! tickets. Everything that came from the CRM, the journal or n8n is untrusted text:
//! it is escaped for HTML and for Markdown, and phones and e-mails are shown masked.

use std::collections::BTreeMap;
use std::fmt::Write;

pub use leadgate_domain::report::{
    CauseCount, LineData, PairData, ReportData, SourceCounts, SourcesRead, VerdictCount,
};

use super::verdict::{Trigger, Verdict};
use super::{Diagnosis, Event};

/// HTML text and attribute escaping; control characters become spaces.
pub fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Markdown inline text: one line, punctuation that could start markup escaped,
/// angle brackets as entities (no raw HTML gets through).
pub fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '#' | '!' | '(' | ')' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A phone or e-mail shown without giving it away: `+7999•••67`, `a•••@example.ru`.
pub fn mask(contact: &str) -> String {
    if let Some((local, domain)) = contact.split_once('@') {
        let first: String = local.chars().take(1).collect();
        return format!("{first}•••@{domain}");
    }
    let chars: Vec<char> = contact.chars().collect();
    if chars.len() <= 6 {
        return "•••".into();
    }
    let head: String = chars[..5].iter().collect();
    let tail: String = chars[chars.len() - 2..].iter().collect();
    format!("{head}•••{tail}")
}

/// The figures of the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub pairs: usize,
    pub per_verdict: BTreeMap<Verdict, usize>,
    /// source → verdict → pairs.
    pub per_source: BTreeMap<String, BTreeMap<Verdict, usize>>,
    /// (verdict, trigger) → pairs, the most frequent first.
    pub causes: Vec<((Verdict, Option<Trigger>), usize)>,
}

pub fn totals(d: &Diagnosis) -> Totals {
    let mut t = Totals::default();
    let mut causes: BTreeMap<(Verdict, Option<Trigger>), usize> = BTreeMap::new();
    for g in &d.groups {
        for p in &g.pairs {
            t.pairs += 1;
            *t.per_verdict.entry(p.finding.verdict).or_default() += 1;
            *t.per_source
                .entry(p.source.clone())
                .or_default()
                .entry(p.finding.verdict)
                .or_default() += 1;
            *causes
                .entry((p.finding.verdict, p.finding.trigger))
                .or_default() += 1;
        }
    }
    let mut causes: Vec<_> = causes.into_iter().collect();
    causes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    t.causes = causes;
    t
}

fn cause_text(verdict: Verdict, trigger: Option<Trigger>) -> String {
    match trigger {
        Some(t) => format!("{}: {}", verdict.title(), t.title()),
        None => verdict.title().to_owned(),
    }
}

fn when(e: &Event) -> String {
    e.at.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "time unknown".into())
}

fn period(d: &Diagnosis) -> String {
    match d.period {
        Some((from, to)) => format!(
            "{} – {}",
            from.format("%Y-%m-%d %H:%M UTC"),
            to.format("%Y-%m-%d %H:%M UTC")
        ),
        None => "the whole export".into(),
    }
}

fn sources_read(d: &Diagnosis) -> SourcesRead {
    SourcesRead {
        entities: count(d.entities_read),
        input: d.input.clone(),
        journal: d.journal,
        executions: d.executions_read.map(count),
    }
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}\
th{background:#f4f4f4}.verdict{font-weight:600}.pair{border-top:2px solid #ddd;margin-top:2em;padding-top:.5em}\
.origin{color:#666;white-space:nowrap}code{background:#f4f4f4;padding:0 .2em}";

/// The report as one self-contained HTML page.
pub fn to_html(d: &Diagnosis) -> String {
    let t = totals(d);
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>Where the duplicates come from</title><style>{STYLE}</style></head><body>\n\
         <h1>Where the duplicates come from</h1>\n<p>Period: {}. Read: {}. Made {}. \
         Leadgate read only: nothing was merged or deleted; merging stays a decision in the CRM.</p>\n",
        html(&period(d)),
        html(&sources_read(d).to_string()),
        d.generated_at.format("%Y-%m-%d %H:%M UTC")
    );
    let _ = write!(
        h,
        "<h2>Totals</h2>\n<p>{} duplicate groups, {} pairs.</p>\n<table id=\"per-verdict\"><tr><th>Verdict</th><th>Pairs</th></tr>\n",
        d.groups.len(),
        t.pairs
    );
    for v in Verdict::ALL {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td></tr>",
            v.title(),
            t.per_verdict.get(&v).copied().unwrap_or(0)
        );
    }
    h.push_str("</table>\n<h3>Per source</h3>\n<table id=\"per-source\"><tr><th>Source</th>");
    for v in Verdict::ALL {
        let _ = write!(h, "<th>{}</th>", v.title());
    }
    h.push_str("</tr>\n");
    for (source, counts) in &t.per_source {
        let _ = write!(h, "<tr><td>{}</td>", html(source));
        for v in Verdict::ALL {
            let _ = write!(h, "<td>{}</td>", counts.get(&v).copied().unwrap_or(0));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n<h3>Top causes</h3>\n<ol id=\"causes\">\n");
    for ((v, tr), n) in &t.causes {
        let _ = writeln!(h, "<li>{} — {n}</li>", html(&cause_text(*v, *tr)));
    }
    h.push_str("</ol>\n<h2>Pairs</h2>\n");
    let mut n = 0;
    for g in &d.groups {
        let shared: Vec<String> = g.shared.iter().map(|c| mask(c)).collect();
        for p in &g.pairs {
            n += 1;
            let (a, b) = (&g.members[p.earlier].entity, &g.members[p.later].entity);
            let _ = write!(
                h,
                "<section class=\"pair\" id=\"pair-{n}\" data-verdict=\"{}\"><h3>Pair {n}: entity {} and entity {}</h3>\n\
                 <p>Shared: {}. <span class=\"verdict\">{}</span></p>\n<ul class=\"evidence\">\n",
                p.finding.verdict.code(),
                html(&a.id),
                html(&b.id),
                html(&shared.join(", ")),
                html(&cause_text(p.finding.verdict, p.finding.trigger))
            );
            for e in &p.finding.evidence {
                let _ = writeln!(h, "<li>{}</li>", html(&e.to_string()));
            }
            h.push_str("</ul>\n<table class=\"timeline\"><tr><th>When</th><th>From</th><th>Entity</th><th>What happened</th></tr>\n");
            for e in g.merged_timeline(p) {
                let _ = writeln!(
                    h,
                    "<tr><td>{}</td><td class=\"origin\">{}</td><td>{}</td><td>{}</td></tr>",
                    html(&when(&e)),
                    e.origin.label(),
                    html(&e.entity),
                    html(&e.text.to_string())
                );
            }
            h.push_str("</table></section>\n");
        }
    }
    if n == 0 {
        h.push_str("<p>No duplicates found.</p>\n");
    }
    h.push_str("</body></html>\n");
    h
}

/// The report as Markdown, for a ticket.
pub fn to_markdown(d: &Diagnosis) -> String {
    let t = totals(d);
    let mut m = String::new();
    let _ = write!(
        m,
        "# Where the duplicates come from\n\nPeriod: {}. Read: {}. Made {}. Leadgate read only: nothing was merged or deleted.\n\n\
         ## Totals\n\n{} duplicate groups, {} pairs.\n\n| Verdict | Pairs |\n|---|---|\n",
        md(&period(d)),
        md(&sources_read(d).to_string()),
        d.generated_at.format("%Y-%m-%d %H:%M UTC"),
        d.groups.len(),
        t.pairs
    );
    for v in Verdict::ALL {
        let _ = writeln!(
            m,
            "| {} | {} |",
            v.title(),
            t.per_verdict.get(&v).copied().unwrap_or(0)
        );
    }
    m.push_str("\n### Per source\n\n| Source |");
    for v in Verdict::ALL {
        let _ = write!(m, " {} |", v.title());
    }
    m.push_str("\n|---|");
    m.push_str(&"---|".repeat(Verdict::ALL.len()));
    m.push('\n');
    for (source, counts) in &t.per_source {
        let _ = write!(m, "| {} |", md(source));
        for v in Verdict::ALL {
            let _ = write!(m, " {} |", counts.get(&v).copied().unwrap_or(0));
        }
        m.push('\n');
    }
    m.push_str("\n### Top causes\n\n");
    for (i, ((v, tr), n)) in t.causes.iter().enumerate() {
        let _ = writeln!(m, "{}. {} — {n}", i + 1, md(&cause_text(*v, *tr)));
    }
    m.push_str("\n## Pairs\n");
    let mut n = 0;
    for g in &d.groups {
        let shared: Vec<String> = g.shared.iter().map(|c| mask(c)).collect();
        for p in &g.pairs {
            n += 1;
            let (a, b) = (&g.members[p.earlier].entity, &g.members[p.later].entity);
            let _ = write!(
                m,
                "\n### Pair {n}: entity {} and entity {}\n\nShared: {}. **{}**\n\n",
                md(&a.id),
                md(&b.id),
                md(&shared.join(", ")),
                md(&cause_text(p.finding.verdict, p.finding.trigger))
            );
            for e in &p.finding.evidence {
                let _ = writeln!(m, "- {}", md(&e.to_string()));
            }
            m.push_str("\n| When | From | Entity | What happened |\n|---|---|---|---|\n");
            for e in g.merged_timeline(p) {
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} |",
                    md(&when(&e)),
                    e.origin.label(),
                    md(&e.entity),
                    md(&e.text.to_string())
                );
            }
        }
    }
    if n == 0 {
        m.push_str("\nNo duplicates found.\n");
    }
    m
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The diagnosis as [`ReportData`].
pub fn data(d: &Diagnosis) -> ReportData {
    let t = totals(d);
    let mut pair_list = vec![];
    for g in &d.groups {
        let shared: Vec<String> = g.shared.iter().map(|c| mask(c)).collect();
        for p in &g.pairs {
            pair_list.push(PairData {
                number: count(pair_list.len() + 1),
                earlier: g.members[p.earlier].entity.id.clone(),
                later: g.members[p.later].entity.id.clone(),
                shared: shared.clone(),
                verdict: p.finding.verdict.code().into(),
                cause: cause_text(p.finding.verdict, p.finding.trigger),
                trigger: p.finding.trigger,
                source: p.source.clone(),
                evidence: p.finding.evidence.iter().map(ToString::to_string).collect(),
                evidence_codes: p.finding.evidence.clone(),
                timeline: g
                    .merged_timeline(p)
                    .into_iter()
                    .map(|e| LineData {
                        at: e.at,
                        origin: e.origin.label().into(),
                        entity: e.entity,
                        text: e.text.to_string(),
                        text_code: Some(e.text),
                    })
                    .collect(),
            });
        }
    }
    ReportData {
        generated_at: d.generated_at,
        input: d.input.to_string(),
        input_code: Some(d.input.clone()),
        period_from: d.period.map(|p| p.0),
        period_to: d.period.map(|p| p.1),
        sources_read: sources_read(d).to_string(),
        sources_read_code: Some(sources_read(d)),
        entities_read: count(d.entities_read),
        groups: count(d.groups.len()),
        pairs: count(t.pairs),
        per_verdict: Verdict::ALL
            .iter()
            .map(|v| VerdictCount {
                verdict: v.code().into(),
                title: v.title().into(),
                pairs: count(t.per_verdict.get(v).copied().unwrap_or(0)),
            })
            .collect(),
        per_source: t
            .per_source
            .iter()
            .map(|(source, counts)| SourceCounts {
                source: source.clone(),
                pairs: Verdict::ALL
                    .iter()
                    .map(|v| count(counts.get(v).copied().unwrap_or(0)))
                    .collect(),
            })
            .collect(),
        causes: t
            .causes
            .iter()
            .map(|((v, tr), n)| CauseCount {
                verdict: v.code().into(),
                cause: cause_text(*v, *tr),
                trigger: *tr,
                pairs: count(*n),
            })
            .collect(),
        pair_list,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_text_cannot_become_markup() {
        let evil = "<script>alert('x')</script> & \"q\"\u{7}";
        assert_eq!(
            html(evil),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot; "
        );
        assert_eq!(
            md("[click](javascript:x) | <b>*bold*</b>\nnext"),
            "\\[click\\]\\(javascript:x\\) \\| &lt;b&gt;\\*bold\\*&lt;/b&gt; next"
        );
    }

    #[test]
    fn contacts_are_masked() {
        assert_eq!(mask("+79991234567"), "+7999•••67");
        assert_eq!(mask("anna@example.ru"), "a•••@example.ru");
        assert_eq!(mask("+7999"), "•••");
    }
}
