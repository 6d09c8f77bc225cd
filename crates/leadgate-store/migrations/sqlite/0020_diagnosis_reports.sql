-- `leadgate diagnose` reports (src/diagnose/report.rs `ReportData`), saved when the run
-- has an operations database, for the console's Diagnosis screen: the console holds no
-- CRM credentials and cannot make a diagnosis itself. `totals` is the pairs per verdict
-- (JSON, for the list), `report` the whole report as JSON; contacts are masked in it as
-- in the HTML and Markdown reports. Reports are only added.
create table diagnosis_reports (
    id            integer primary key autoincrement,
    generated_at  text not null,
    input         text not null,
    period_from   text,
    period_to     text,
    group_count   integer not null,
    pair_count    integer not null,
    totals        text not null,
    report        text not null
);
create index diagnosis_reports_generated_at on diagnosis_reports (generated_at);
