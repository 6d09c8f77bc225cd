-- `leadgate diagnose` reports (src/diagnose/report.rs `ReportData`), saved when the run
-- has an operations database, for the console's Diagnosis screen: the console holds no
-- CRM credentials and cannot make a diagnosis itself. `totals` is the pairs per verdict
-- (JSON, for the list), `report` the whole report as JSON; contacts are masked in it as
-- in the HTML and Markdown reports. Reports are only added.
--
-- Who reads it: casework (sales_ops, manager), as every other table, through
-- `leadgate_install_roles()` (migration 0017), which the migrating gateway runs again
-- after this migration (`refresh_role_grants`). Not support: a report names operation
-- keys, CRM ids, sources and what the journal says of each lead, which is casework, not
-- figures.
create table diagnosis_reports (
    id            bigserial primary key,
    generated_at  timestamptz not null,
    input         text not null,
    period_from   timestamptz,
    period_to     timestamptz,
    group_count   bigint not null,
    pair_count    bigint not null,
    totals        text not null,
    report        text not null
);
create index diagnosis_reports_generated_at on diagnosis_reports (generated_at);
