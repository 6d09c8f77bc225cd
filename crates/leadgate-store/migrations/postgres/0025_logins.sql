-- Issue 32: the gateway's login needs no CREATEROLE (people's logins are made by an
-- administration login: store/postgres/logins.rs), and a login in two of Leadgate's roles
-- is one role, the same for the database and for `leadgate user list`.
--
-- leadgate_role_of gets a defined order: the least privileged role wins. support (the
-- figures) < admin (the figures and resuming a connector: no contact data) < sales_ops
-- (the cases and their contact data) < manager (what sales_ops may, and more). A login
-- given a second role by hand asks as the lesser one; `leadgate user list` calls this
-- function and shows the same role (and the others it holds, whose table grants
-- PostgreSQL adds up). Membership is 'usage' (the role's rights are the login's), so a
-- membership without them — PostgreSQL 16's ADMIN OPTION that a CREATEROLE login keeps
-- on the roles it created — makes nobody a person. A login that does not exist (dropped
-- by another session meanwhile) is in no role: null, not an error.
create or replace function leadgate_role_of(login name) returns text
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select w.r from unnest(array['leadgate_support', 'leadgate_admin', 'leadgate_sales_ops',
                                 'leadgate_manager']) with ordinality as w(r, n)
    join pg_roles g on g.rolname = w.r
    join pg_roles m on m.rolname = login
    where pg_has_role(m.oid, g.oid, 'usage')
    order by w.n
    limit 1
$$;
