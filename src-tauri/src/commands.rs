//! The console's commands: one line each, delegating to `leadgate-console-model`. No SQL
//! and no decisions here; the types (and their TypeScript twins) live in the model crate.

use leadgate_console_model::{
    ActionOutcome, ActionRequest, ApiResult, BulkAction, BulkPreview, BulkProgress, BulkRequest,
    CaseDetail, Connection, ConnectorView, ConsoleError, ConsoleState, Dashboard, DiagnosisRow,
    DiagnosisView, ExportRequest, FeedAttemptView, FeedSubscribed, FeedSubscriberView,
    LookupResult, QueuePage, QueueQuery, QueueRow, Range, ResendRequest, RulesEdit, RulesView,
    SearchResults, Selection, Settings, Tab, TabCounts, TimelinePageView,
};
use tauri::State;

type S<'a> = State<'a, ConsoleState>;

#[tauri::command]
pub async fn settings(state: S<'_>) -> ApiResult<Settings> {
    Ok(state.settings().await)
}

#[tauri::command]
pub async fn save_settings(
    app: tauri::AppHandle,
    state: S<'_>,
    settings: Settings,
) -> ApiResult<Settings> {
    let saved = state.save_settings(settings).await?;
    if state.console().await.is_ok() {
        grant_crm_origins(&app, &state).await?;
    }
    Ok(saved)
}

#[tauri::command]
pub async fn connect(
    app: tauri::AppHandle,
    state: S<'_>,
    url: Option<String>,
) -> ApiResult<Connection> {
    let connection = state.connect(url).await?;
    grant_crm_origins(&app, &state).await?;
    Ok(connection)
}

/// Shows another of the login's tenants (fleet mode), remembered for the next start.
#[tauri::command]
pub async fn select_tenant(
    app: tauri::AppHandle,
    state: S<'_>,
    slug: String,
) -> ApiResult<Connection> {
    let connection = state.select_tenant(&slug).await?;
    grant_crm_origins(&app, &state).await?;
    Ok(connection)
}

/// Scopes "open in CRM" to the CRM addresses this database and the settings name.
async fn grant_crm_origins(app: &tauri::AppHandle, state: &S<'_>) -> ApiResult<()> {
    let template = state.settings().await.crm_url_template;
    let origins = state
        .console()
        .await?
        .crm_origins(template.as_deref())
        .await?;
    crate::allow_opening(app, &origins).map_err(|message| ConsoleError::Failed { message })
}

#[tauri::command]
pub async fn counts(state: S<'_>) -> ApiResult<TabCounts> {
    state.console().await?.counts().await
}

#[tauri::command]
pub async fn queue(state: S<'_>, tab: Tab, query: QueueQuery) -> ApiResult<QueuePage> {
    state.console().await?.queue(tab, query).await
}

#[tauri::command]
pub async fn case_detail(
    state: S<'_>,
    operation_id: String,
    case_id: Option<i64>,
) -> ApiResult<CaseDetail> {
    let template = state.settings().await.crm_url_template;
    state
        .console()
        .await?
        .case_detail(&operation_id, case_id, template.as_deref())
        .await
}

#[tauri::command]
pub async fn older_events(
    state: S<'_>,
    operation_id: String,
    before: i64,
) -> ApiResult<TimelinePageView> {
    state
        .console()
        .await?
        .older_events(&operation_id, before)
        .await
}

#[tauri::command]
pub async fn act(state: S<'_>, request: ActionRequest) -> ApiResult<ActionOutcome> {
    state
        .console()
        .await?
        .act(&state.operator().await?, request)
        .await
}

#[tauri::command]
pub async fn open_case(
    state: S<'_>,
    operation_id: String,
    comment: Option<String>,
) -> ApiResult<i64> {
    state
        .console()
        .await?
        .open_case(&state.operator().await?, &operation_id, comment)
        .await
}

/// *Fix and resend…* (`Console::resend`).
#[tauri::command]
pub async fn resend(state: S<'_>, request: ResendRequest) -> ApiResult<ActionOutcome> {
    state
        .console()
        .await?
        .resend(&state.operator().await?, request)
        .await
}

#[tauri::command]
pub async fn resume_connector(state: S<'_>, name: String) -> ApiResult<bool> {
    state
        .console()
        .await?
        .resume_connector(&state.operator().await?, &name)
        .await
}

#[tauri::command]
pub async fn pause_connector(state: S<'_>, name: String, reason: String) -> ApiResult<bool> {
    state
        .console()
        .await?
        .pause_connector(&state.operator().await?, &name, &reason)
        .await
}

#[tauri::command]
pub async fn feed_subscribers(state: S<'_>) -> ApiResult<Vec<FeedSubscriberView>> {
    state.console().await?.feed_subscribers().await
}

#[tauri::command]
pub async fn feed_attempts(state: S<'_>, id: i64) -> ApiResult<Vec<FeedAttemptView>> {
    state.console().await?.feed_attempts(id).await
}

#[tauri::command]
pub async fn feed_subscribe(
    state: S<'_>,
    url: String,
    events: Vec<String>,
) -> ApiResult<FeedSubscribed> {
    state
        .console()
        .await?
        .feed_subscribe(&state.operator().await?, &url, events)
        .await
}

#[tauri::command]
pub async fn feed_remove(state: S<'_>, id: i64) -> ApiResult<bool> {
    state
        .console()
        .await?
        .feed_remove(&state.operator().await?, id)
        .await
}

#[tauri::command]
pub async fn feed_enable(state: S<'_>, id: i64) -> ApiResult<bool> {
    state
        .console()
        .await?
        .feed_enable(&state.operator().await?, id)
        .await
}

#[tauri::command]
pub async fn connectors(state: S<'_>) -> ApiResult<Vec<ConnectorView>> {
    state.console().await?.connectors().await
}

#[tauri::command]
pub async fn diagnoses(state: S<'_>) -> ApiResult<Vec<DiagnosisRow>> {
    state.console().await?.diagnoses().await
}

#[tauri::command]
pub async fn diagnosis(state: S<'_>, id: i64) -> ApiResult<DiagnosisView> {
    state.console().await?.diagnosis(id).await
}

#[tauri::command]
pub async fn cases_after(state: S<'_>, after: Option<i64>) -> ApiResult<Vec<QueueRow>> {
    state.console().await?.cases_after(after).await
}

#[tauri::command]
pub async fn dashboard(state: S<'_>, range: Range) -> ApiResult<Dashboard> {
    state.console().await?.dashboard(range).await
}

/// Shows a desktop notification and records it on the timeline of the operations it is
/// about (`what`: `review_opened`, `connector_paused`); clicking it opens `open`.
#[tauri::command]
pub async fn notify(
    app: tauri::AppHandle,
    state: S<'_>,
    title: String,
    body: String,
    what: String,
    operation_ids: Vec<String>,
    open: Option<crate::OpenTarget>,
) -> ApiResult<()> {
    crate::notify(&app, &title, &body, open);
    state
        .console()
        .await?
        .record_notification(&state.operator().await?, &what, &operation_ids)
        .await
}

#[tauri::command]
pub async fn bulk_preview(
    state: S<'_>,
    selection: Selection,
    action: BulkAction,
) -> ApiResult<BulkPreview> {
    state.console().await?.bulk_preview(selection, action).await
}

#[tauri::command]
pub async fn bulk_start(state: S<'_>, request: BulkRequest) -> ApiResult<String> {
    state
        .console()
        .await?
        .bulk_start(&state.operator().await?, request)
        .await
}

#[tauri::command]
pub async fn bulk_progress(state: S<'_>, id: String) -> ApiResult<BulkProgress> {
    state.console().await?.bulk_progress(&id).await
}

/// Writes the tab's rows as CSV into the export folder (`LEADGATE_EXPORT_DIR`, else the
/// user's Downloads, else home); answers the file's path and the number of rows.
#[tauri::command]
pub async fn export_csv(
    app: tauri::AppHandle,
    state: S<'_>,
    request: ExportRequest,
) -> ApiResult<(String, usize)> {
    use tauri::Manager;
    let dir = std::env::var_os("LEADGATE_EXPORT_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| app.path().download_dir().ok())
        .or_else(|| app.path().home_dir().ok())
        .ok_or_else(|| ConsoleError::Failed {
            message: "no folder to export to".into(),
        })?;
    let (path, n) = state.console().await?.export_to(&dir, &request).await?;
    Ok((path.display().to_string(), n))
}

/// Operations of any status by key, phone (any format), e-mail, crm_id or name.
#[tauri::command]
pub async fn search(
    state: S<'_>,
    query: String,
    cursor: Option<String>,
) -> ApiResult<SearchResults> {
    state
        .console()
        .await?
        .search(&query, cursor, Some(50))
        .await
}

/// "Did my lead arrive?": status, received-at and crm_id by phone, key or crm_id.
#[tauri::command]
pub async fn lookup(state: S<'_>, query: String) -> ApiResult<LookupResult> {
    state.console().await?.lookup(&query).await
}

/// Every source's business rules and their history.
#[tauri::command]
pub async fn rules(state: S<'_>) -> ApiResult<RulesView> {
    state.console().await?.rules().await
}

/// A manager's edit of one source's business rules.
#[tauri::command]
pub async fn set_rules(state: S<'_>, edit: RulesEdit) -> ApiResult<RulesView> {
    state
        .console()
        .await?
        .set_rules(&state.operator().await?, edit)
        .await
}
