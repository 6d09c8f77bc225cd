-- Request pacing shared by every process of the installation (domain::pacing, crm::rate):
-- per CRM account, the theoretical arrival time of its next request, in milliseconds
-- since the epoch on the store's clock. The account is the CRM's address without any
-- secret (a Bitrix24 portal and webhook user, an amoCRM account URL).
create table request_pacing (
    account  text primary key,
    tat_ms   double precision not null
);
