//! `ui/src/lib/bindings.ts`: the TypeScript declarations of every wire type (ts-rs).

use super::*;

/// The TypeScript declarations of every type above, as `ui/src/lib/bindings.ts` holds them.
pub fn typescript_bindings() -> String {
    let cfg = ts_rs::Config::default();
    let decls = [
        ConsoleError::decl(&cfg),
        Settings::decl(&cfg),
        Connection::decl(&cfg),
        TenantOption::decl(&cfg),
        Permissions::decl(&cfg),
        Tab::decl(&cfg),
        QueueQuery::decl(&cfg),
        QueueRow::decl(&cfg),
        LeadSummary::decl(&cfg),
        QueuePage::decl(&cfg),
        TabCounts::decl(&cfg),
        OperationView::decl(&cfg),
        CaseView::decl(&cfg),
        EventView::decl(&cfg),
        DeliveryPayload::decl(&cfg),
        Conflict::decl(&cfg),
        CaseDetail::decl(&cfg),
        TimelinePageView::decl(&cfg),
        CrmEntityView::decl(&cfg),
        FoundInCrm::decl(&cfg),
        Action::decl(&cfg),
        ActionRequest::decl(&cfg),
        ResendRequest::decl(&cfg),
        ActionOutcome::decl(&cfg),
        ConnectorView::decl(&cfg),
        FeedSubscriberView::decl(&cfg),
        FeedAttemptView::decl(&cfg),
        FeedSubscribed::decl(&cfg),
        SeriesPointView::decl(&cfg),
        Dashboard::decl(&cfg),
        Range::decl(&cfg),
        BulkAction::decl(&cfg),
        Selection::decl(&cfg),
        BulkItem::decl(&cfg),
        BulkPreview::decl(&cfg),
        BulkRequest::decl(&cfg),
        BulkSkip::decl(&cfg),
        BulkProgress::decl(&cfg),
        RecheckOutcomes::decl(&cfg),
        ReasonGroup::decl(&cfg),
        ExportRequest::decl(&cfg),
        SearchRow::decl(&cfg),
        SearchResults::decl(&cfg),
        LookupRow::decl(&cfg),
        LookupResult::decl(&cfg),
        DiagnosisRow::decl(&cfg),
        DiagnosisView::decl(&cfg),
        ReportData::decl(&cfg),
        VerdictCount::decl(&cfg),
        SourceCounts::decl(&cfg),
        CauseCount::decl(&cfg),
        PairData::decl(&cfg),
        LineData::decl(&cfg),
        ReportInput::decl(&cfg),
        SourcesRead::decl(&cfg),
        Trigger::decl(&cfg),
        KeyKind::decl(&cfg),
        ContentMeasure::decl(&cfg),
        Evidence::decl(&cfg),
        LineDetail::decl(&cfg),
        LineText::decl(&cfg),
        SourceRulesView::decl(&cfg),
        RuleValues::decl(&cfg),
        RuleChangeView::decl(&cfg),
        RulesView::decl(&cfg),
        RulesEdit::decl(&cfg),
    ];
    let mut out = String::from(
        "// Generated from crates/leadgate-console-model/src/lib.rs by ts-rs: do not edit.\n\
         // Regenerate: UPDATE_BINDINGS=1 cargo test -p leadgate-console-model bindings_are_fresh\n\n\
         export type JsonValue = number | string | boolean | Array<JsonValue> | { [key in string]?: JsonValue } | null;\n",
    );
    for d in decls {
        out.push_str("\nexport ");
        out.push_str(&d);
        out.push('\n');
    }
    // The timeline's kinds, from the one list (`domain::EventKind`): what the console
    // has sentences for.
    out.push_str(
        "\n/** Every kind of timeline event Leadgate writes (`EventKind` in crates/leadgate-domain). */\n\
         export const EVENT_KINDS = [\n",
    );
    for k in EventKind::ALL {
        out.push_str(&format!("  \"{k}\",\n"));
    }
    out.push_str("] as const;\n\nexport type EventKind = (typeof EVENT_KINDS)[number];\n");
    out
}
