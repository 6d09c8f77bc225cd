//! [`Reads`](crate::Reads) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! reads_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Reads for $store {
            async fn operation(&self, id: &OperationId) -> Result<Option<Operation>> {
                let sql = format!("select {OP_COLUMNS} from operations where operation_id = $1");
                let row = sqlx::query(&sql)
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(op_from_row).transpose()
            }

            async fn tenant_operations(&self, after: Option<&str>, limit: i64) -> Result<Vec<Operation>> {
                let sql = format!(
                    "select {OP_COLUMNS} from operations where tenant_id = $1 and operation_id > $2 \
                     order by operation_id limit $3"
                );
                let rows = sqlx::query(&sql)
                    .bind(self.tenant.0)
                    .bind(after.unwrap_or(""))
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(op_from_row).collect()
            }

            async fn diagnoses(&self, limit: i64) -> Result<Vec<DiagnosisSummary>> {
                let rows = sqlx::query(
                    "select id, generated_at, input, period_from, period_to, group_count, \
                     pair_count, totals from diagnosis_reports where tenant_id = $2 \
                     order by generated_at desc, id desc limit $1",
                )
                .bind(limit)
                .bind(self.tenant.0)
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(diagnosis_from_row).collect()
            }

            async fn diagnosis(&self, id: i64) -> Result<Option<(DiagnosisSummary, Value)>> {
                sqlx::query_as::<_, DiagnosisReportRow>(
                    "select id, generated_at, input, period_from, period_to, group_count, \
                     pair_count, totals, report from diagnosis_reports where id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .map(TryInto::try_into)
                .transpose()
            }

            async fn operations(&self, ids: &[OperationId]) -> Result<Vec<Operation>> {
                let mut found = vec![];
                for chunk in ids.chunks(500) {
                    let marks = (1..=chunk.len())
                        .map(|i| format!("${i}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    let sql = format!(
                        "select {OP_COLUMNS} from operations where operation_id in ({marks})"
                    );
                    let mut q = sqlx::query(&sql);
                    for id in chunk {
                        q = q.bind(id.as_str());
                    }
                    for row in q.fetch_all(&self.pool).await? {
                        found.push(op_from_row(&row)?);
                    }
                }
                Ok(found)
            }

            async fn timeline(&self, id: &OperationId) -> Result<Vec<TimelineEvent>> {
                let rows = sqlx::query(
                    "select id, at, kind, actor, error_class, detail from timeline \
                     where operation_id = $1 order by id",
                )
                .bind(id.as_str())
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(event_from_row).collect()
            }

            async fn timeline_page(
                &self,
                id: &OperationId,
                before: Option<i64>,
                limit: i64,
            ) -> Result<TimelinePage> {
                let limit = limit.clamp(1, TIMELINE_PAGE_MAX);
                let rows = sqlx::query(
                    "select id, at, kind, actor, error_class, detail from timeline \
                     where operation_id = $1 and id < $2 order by id desc limit $3",
                )
                .bind(id.as_str())
                .bind(before.unwrap_or(i64::MAX))
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                let mut events = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
                events.reverse();
                // Counted only when the page is full: a shorter page is the whole rest.
                let older = match events.first() {
                    Some(first) if events.len() as i64 == limit => {
                        sqlx::query_scalar(
                            "select count(*) from timeline where operation_id = $1 and id < $2",
                        )
                        .bind(id.as_str())
                        .bind(first.id)
                        .fetch_one(&self.pool)
                        .await?
                    }
                    _ => 0,
                };
                Ok(TimelinePage { events, older })
            }

            async fn timeline_of_kind(
                &self,
                id: &OperationId,
                kind: &str,
                limit: i64,
            ) -> Result<Vec<TimelineEvent>> {
                let rows = sqlx::query(
                    "select id, at, kind, actor, error_class, detail from timeline \
                     where operation_id = $1 and kind = $2 order by id desc limit $3",
                )
                .bind(id.as_str())
                .bind(kind)
                .bind(limit.clamp(1, TIMELINE_PAGE_MAX))
                .fetch_all(&self.pool)
                .await?;
                let mut events = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
                events.reverse();
                Ok(events)
            }

            async fn cases_of(&self, id: &OperationId) -> Result<Vec<ReviewCase>> {
                let sql = format!(
                    "select {CASE_COLUMNS} from review_cases c join operations o \
                     on o.operation_id = c.operation_id where c.operation_id = $1 order by c.id"
                );
                let rows = sqlx::query(&sql).bind(id.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map(case_from_row).collect()
            }

            async fn case(&self, case_id: i64) -> Result<Option<ReviewCase>> {
                let sql = format!(
                    "select {CASE_COLUMNS} from review_cases c join operations o \
                     on o.operation_id = c.operation_id where c.id = $1"
                );
                let row = sqlx::query(&sql).bind(case_id).fetch_optional(&self.pool).await?;
                row.as_ref().map(case_from_row).transpose()
            }

            async fn review_cases(&self, f: &CaseFilter, page: Page) -> Result<Vec<ReviewCase>> {
                let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                    "select {CASE_COLUMNS} from review_cases c join operations o \
                     on o.operation_id = c.operation_id where c.tenant_id = "
                ));
                q.push_bind(self.tenant.0);
                q.push(if f.resolved { " and c.resolved_at is not null" } else { " and c.resolved_at is null" });
                if let Some(reason) = f.reason {
                    q.push(" and c.reason = ").push_bind(reason.as_str());
                }
                if let Some(reason) = f.except_reason {
                    q.push(" and c.reason <> ").push_bind(reason.as_str());
                }
                if let Some(source) = &f.source {
                    q.push(" and o.source = ").push_bind(source.clone());
                }
                if let Some(before) = f.opened_before {
                    q.push(" and c.opened_at < ").push_bind(before);
                }
                if let Some(after_id) = page.after_id {
                    q.push(if f.newest_first { " and c.id < " } else { " and c.id > " })
                        .push_bind(after_id);
                }
                q.push(if f.newest_first { " order by c.id desc limit " } else { " order by c.id limit " })
                    .push_bind(page.limit.clamp(1, 1000));
                let rows = q.build().fetch_all(&self.pool).await?;
                rows.iter().map(case_from_row).collect()
            }

            async fn operations_with_status(
                &self,
                status: Status,
                page: OperationPage,
            ) -> Result<Vec<Operation>> {
                // Served by the operations_status index (status, updated_at).
                let mut q = op_page_query(self.tenant, status, "updated_at", None, &page);
                let rows = q.build().fetch_all(&self.pool).await?;
                rows.iter().map(op_from_row).collect()
            }

            async fn link_candidates(&self, id: &OperationId, limit: i64) -> Result<Vec<Operation>> {
                // The newest `limit` from each index (operations_phone, operations_email: contact,
                // created_at), joined by union: bounded however many leads share a phone.
                let sql = format!(
                    "select {OP_COLUMNS} from operations where operation_id in ( \
                       select operation_id from (select o.operation_id from operations o \
                         join operations me on me.operation_id = $1 and o.contact_phone = me.contact_phone \
                           and o.tenant_id = me.tenant_id \
                         where o.operation_id <> $1 order by o.created_at desc limit $2) p \
                       union \
                       select operation_id from (select o.operation_id from operations o \
                         join operations me on me.operation_id = $1 and o.contact_email = me.contact_email \
                           and o.tenant_id = me.tenant_id \
                         where o.operation_id <> $1 order by o.created_at desc limit $2) e) \
                     order by created_at desc, operation_id limit $2"
                );
                let rows = sqlx::query(&sql)
                    .bind(id.as_str())
                    .bind(limit.clamp(1, 200))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(op_from_row).collect()
            }

            async fn delivery(&self, delivery_id: i64) -> Result<Option<DeliveryView>> {
                let row = sqlx::query(
                    "select id, source, operation_id, received_at, outcome, payload, payload_hash \
                     from deliveries where id = $1",
                )
                .bind(delivery_id)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(delivery_from_row).transpose()
            }

            async fn lookup(
                &self,
                phone: Option<&str>,
                text: Option<&str>,
                limit: i64,
            ) -> Result<Vec<LookupHit>> {
                // PostgreSQL: the function people may run; SQLite (one operator): its body.
                let sql = if DIALECT.backend == $crate::Backend::Postgres {
                    "select operation_id, source, status, received_at, crm_id \
                     from leadgate_lookup($1, $2, cast($3 as integer), cast($4 as integer))"
                } else {
                    "select o.operation_id, o.source, o.status, o.created_at as received_at, o.crm_id \
                     from operations o where o.tenant_id = $4 and o.operation_id in ( \
                         select m.operation_id from operations m \
                             where $1 is not null and m.contact_phone = $1 \
                         union select m.operation_id from operations m where m.operation_id = $2 \
                         union select m.operation_id from operations m \
                             where $2 is not null and m.crm_id = $2) \
                     order by o.created_at desc, o.operation_id desc limit max(min($3, 50), 1)"
                };
                let rows = sqlx::query_as::<_, $crate::rows::LookupRow>(sql)
                    .bind(phone)
                    .bind(text)
                    .bind(limit)
                    .bind(self.tenant.0)
                    .fetch_all(&self.pool)
                    .await?;
                rows.into_iter().map(LookupHit::try_from).collect()
            }

            async fn states_of(&self, ids: &[String]) -> Result<Vec<OperationState>> {
                let mut out = Vec::with_capacity(ids.len());
                // Bound parameters stay well under both backends' limits per statement.
                for chunk in ids.chunks(500) {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "select operation_id, status, crm_link from operations where operation_id in (",
                    );
                    let mut list = q.separated(", ");
                    for id in chunk {
                        list.push_bind(id.clone());
                    }
                    q.push(")");
                    let rows = q
                        .build_query_as::<$crate::rows::StateRow>()
                        .fetch_all(&self.pool)
                        .await?;
                    for r in rows {
                        out.push(OperationState::try_from(r)?);
                    }
                }
                Ok(out)
            }

            async fn schema_version(&self) -> Result<Option<i64>> {
                // sqlx's own bookkeeping table; absent on a database never migrated.
                match sqlx::query_scalar::<_, Option<i64>>(
                    "select max(version) from _sqlx_migrations where success",
                )
                .fetch_one(&self.pool)
                .await
                {
                    Ok(v) => Ok(v),
                    Err(sqlx::Error::Database(_)) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }

            // Search

            async fn search(
                &self,
                query: &SearchQuery,
                after: Option<&SearchCursor>,
                limit: i64,
                plan: SearchPlan,
            ) -> Result<SearchPage> {
                use leadgate_domain::search::prefix_end;
                use $crate::reads::NameRows;
                // Every statement here is planned for its values (`persistent(false)`: not
                // kept prepared). A statement prepared once and run again is planned, after
                // five runs, for any values: PostgreSQL then read a whole name word's range
                // where the query's own values needed a few rows (0.5 s instead of 36 ms
                // over 5,000,000 operations).
                use $crate::sql::like_escape;
                type Q = sqlx::QueryBuilder<'static, $db>;
                let limit = limit.clamp(1, 200);
                // The store's tenant's operations only: the console shows one tenant.
                let tenant = self.tenant.0;
                // A key prefix is a byte range: SQLite's primary key is BINARY; on
                // PostgreSQL, whatever the database's collation, the "C" expression index
                // of migration 0012.
                let key_col = if DIALECT.backend == $crate::Backend::Postgres { "(o.operation_id collate \"C\")" } else { "o.operation_id" };
                // The tenant of a key range: on PostgreSQL the index's first column; on
                // SQLite tested on the row (`+`: no index of it), or its planner, told that a
                // tenant has a fleet's average of rows, walked a large tenant's operations
                // instead of the key's range (0.1 s for a key prefix over 5,000,000).
                let key_tenant = if DIALECT.backend == $crate::Backend::Postgres { "o.tenant_id = " } else { "+o.tenant_id = " };
                // Newest first, after the cursor: `(at, id) < (cursor)`, written so that the
                // first half is an index bound.
                let keyset = |q: &mut Q, at: &str, id: &str| {
                    if let Some(c) = after {
                        q.push(format!(" and {at} <= ")).push_bind(c.created_at)
                            .push(format!(" and ({at} < ")).push_bind(c.created_at)
                            .push(format!(" or {id} < ")).push_bind(c.operation_id.clone())
                            .push(")");
                    }
                };
                let range = |q: &mut Q, col: &str, prefix: &str| {
                    q.push(format!("{col} >= ")).push_bind(prefix.to_owned());
                    if let Some(end) = prefix_end(prefix) {
                        q.push(format!(" and {col} < ")).push_bind(end);
                    }
                };
                // The row's name has a word starting with `w` (words are letters and
                // digits only; escaped all the same).
                let word_like = |q: &mut Q, w: &str| {
                    q.push("o.name_words like ").push_bind(format!("% {}%", like_escape(w)))
                        .push(" escape '\\'");
                };
                let select = |q: &mut Q| {
                    q.push(
                        "select o.operation_id, o.source, o.status, o.created_at, o.updated_at, o.crm_id, \
                         o.review_reason, o.contact_name, o.contact_phone, o.contact_email, \
                         (select max(c.id) from review_cases c where c.operation_id = o.operation_id \
                           and c.resolved_at is null) as open_case_id from ",
                    );
                };
                let order = |q: &mut Q| {
                    q.push(" order by o.created_at desc, o.operation_id desc limit ").push_bind(limit + 1);
                };
                // Walk: the tenant's operations newest first (operations_tenant_created),
                // each tested; only the newest `window` of them after the cursor when given
                // (a subquery with its own limit: the planner walks the index whatever it
                // guesses of the rest; a bound it could not see made PostgreSQL scan the
                // table).
                let walk = |text: &str, prefix: &str, words: &[String], window: Option<i64>| {
                    let mut q = Q::new("");
                    select(&mut q);
                    match window {
                        Some(w) => {
                            q.push("(select * from operations o2 where o2.tenant_id = ").push_bind(tenant);
                            keyset(&mut q, "o2.created_at", "o2.operation_id");
                            q.push(" order by o2.created_at desc, o2.operation_id desc limit ")
                                .push_bind(w)
                                .push(") o where true");
                        }
                        None => {
                            q.push("operations o where o.tenant_id = ").push_bind(tenant);
                            keyset(&mut q, "o.created_at", "o.operation_id");
                        }
                    }
                    q.push(" and ((");
                    range(&mut q, key_col, prefix);
                    q.push(") or o.crm_id = ").push_bind(text.to_owned());
                    if !words.is_empty() {
                        q.push(" or (");
                        for (i, w) in words.iter().enumerate() {
                            q.push(if i == 0 { "" } else { " and " });
                            word_like(&mut q, w);
                        }
                        q.push(")");
                    }
                    q.push(")");
                    order(&mut q);
                    q
                };
                // Ranges: each index (key prefix, crm_id, name words) gives its newest
                // `limit + 1` rows after the cursor; the union is sorted. The name's rows
                // are those of `names` (`NameRows`).
                let ranges = |text: &str, prefix: &str, words: &[String], names: NameRows| {
                    let mut q = Q::new("");
                    select(&mut q);
                    q.push("operations o where o.operation_id in (select operation_id from (");
                    q.push("select operation_id from (select o.operation_id from operations o where ")
                        .push(key_tenant)
                        .push_bind(tenant)
                        .push(" and ");
                    range(&mut q, key_col, prefix);
                    keyset(&mut q, "o.created_at", "o.operation_id");
                    q.push(" order by o.created_at desc, o.operation_id desc limit ").push_bind(limit + 1);
                    q.push(") k union select operation_id from (select o.operation_id from operations o where o.tenant_id = ")
                        .push_bind(tenant)
                        .push(" and o.crm_id = ")
                        .push_bind(text.to_owned());
                    keyset(&mut q, "o.created_at", "o.operation_id");
                    q.push(" order by o.created_at desc, o.operation_id desc limit ").push_bind(limit + 1);
                    q.push(") c");
                    match names {
                        _ if words.is_empty() => {}
                        NameRows::Lead(l) => {
                            // Distinct: two words of one name may both start with the lead.
                            q.push(" union select operation_id from (select distinct n.operation_id, n.created_at from operation_names n");
                            if words.len() > 1 {
                                q.push(" join operations o on o.operation_id = n.operation_id");
                            }
                            q.push(" where n.tenant_id = ").push_bind(tenant).push(" and ");
                            range(&mut q, "n.word", &words[l]);
                            for (i, w) in words.iter().enumerate() {
                                if i != l {
                                    q.push(" and ");
                                    word_like(&mut q, w);
                                }
                            }
                            keyset(&mut q, "n.created_at", "n.operation_id");
                            q.push(" order by n.created_at desc, n.operation_id desc limit ").push_bind(limit + 1);
                            q.push(") w");
                        }
                        NameRows::Pair(a, b) => {
                            // Distinct: a name with three words holds a pair twice over.
                            q.push(" union select operation_id from (select distinct p.operation_id, p.created_at from operation_name_pairs p");
                            if words.len() > 2 {
                                q.push(" join operations o on o.operation_id = p.operation_id");
                            }
                            q.push(" where p.tenant_id = ").push_bind(tenant).push(" and ");
                            range(&mut q, "p.word", &words[a]);
                            q.push(" and ");
                            range(&mut q, "p.other", &words[b]);
                            for (i, w) in words.iter().enumerate() {
                                if i != a && i != b {
                                    q.push(" and ");
                                    word_like(&mut q, w);
                                }
                            }
                            keyset(&mut q, "p.created_at", "p.operation_id");
                            q.push(" order by p.created_at desc, p.operation_id desc limit ").push_bind(limit + 1);
                            q.push(") w");
                        }
                        NameRows::Intersect => {
                            q.push(" union select operation_id from (select distinct operation_id, created_at from (");
                            for (i, w) in words.iter().enumerate() {
                                q.push(if i == 0 { "" } else { " intersect " });
                                q.push("select n.operation_id, n.created_at from operation_names n where n.tenant_id = ")
                                    .push_bind(tenant)
                                    .push(" and ");
                                range(&mut q, "n.word", w);
                                keyset(&mut q, "n.created_at", "n.operation_id");
                            }
                            q.push(") i order by created_at desc, operation_id desc limit ").push_bind(limit + 1);
                            q.push(") w");
                        }
                    }
                    q.push(") u)");
                    order(&mut q);
                    q
                };
                let rows = match query {
                    SearchQuery::Phone(v) | SearchQuery::Email(v) => {
                        let col = if matches!(query, SearchQuery::Phone(_)) { "o.contact_phone" } else { "o.contact_email" };
                        let mut q = Q::new("");
                        select(&mut q);
                        q.push("operations o where o.tenant_id = ").push_bind(tenant);
                        q.push(format!(" and {col} = ")).push_bind(v.clone());
                        keyset(&mut q, "o.created_at", "o.operation_id");
                        order(&mut q);
                        q.build().persistent(false).fetch_all(&self.pool).await?
                    }
                    SearchQuery::Text { text, words, key } => {
                        // A query word that begins another says nothing more (`петр петро`:
                        // a word beginning with `петро` begins with `петр`): left out, the
                        // others each match a word of their own.
                        let words: &[String] = &words
                            .iter()
                            .filter(|w| !words.iter().any(|v| v != *w && v.starts_with(w.as_str())))
                            .cloned()
                            .collect::<Vec<_>>();
                        // (Window: when the newest `w` operations hold a full page, it is
                        // the page: every older match is older than all of them.)
                        let walked = |w: i64| async move {
                            let rows = walk(text, key, words, Some(w)).build().persistent(false).fetch_all(&self.pool).await?;
                            Ok::<_, StoreError>((rows.len() as i64 > limit).then_some(rows))
                        };
                        let ranged = |names: NameRows| async move {
                            Ok::<_, StoreError>(ranges(text, key, words, names).build().persistent(false).fetch_all(&self.pool).await?)
                        };
                        match plan {
                            SearchPlan::Walk => walk(text, key, words, None).build().persistent(false).fetch_all(&self.pool).await?,
                            SearchPlan::Ranges => ranged(NameRows::Intersect).await?,
                            SearchPlan::Pairs => ranged(NameRows::pair_or_intersect(words.len(), 0, 1)).await?,
                            SearchPlan::Window(w) => match walked(w.max(1)).await? {
                                Some(rows) => rows,
                                None => ranged(NameRows::Intersect).await?,
                            },
                            SearchPlan::Auto => {
                                // Each range counted in its index, up to SEARCH_WALK_AFTER rows
                                // and no further.
                                let mut q = Q::new("select count(*) from (select 1 from operations o where ");
                                q.push(key_tenant);
                                q.push_bind(tenant).push(" and ");
                                range(&mut q, key_col, key);
                                q.push(" limit ").push_bind(SEARCH_WALK_AFTER).push(") k");
                                let keys: i64 = q.build_query_scalar().persistent(false).fetch_one(&self.pool).await?;
                                let mut counts: Vec<(usize, i64)> = vec![];
                                for (i, w) in words.iter().enumerate() {
                                    let mut q = Q::new("select count(*) from (select 1 from operation_names n where n.tenant_id = ");
                                    q.push_bind(tenant).push(" and ");
                                    range(&mut q, "n.word", w);
                                    q.push(" limit ").push_bind(SEARCH_WALK_AFTER).push(") w");
                                    counts.push((i, q.build_query_scalar().persistent(false).fetch_one(&self.pool).await?));
                                }
                                // Rarest first (the first of equals).
                                counts.sort_by_key(|&(i, n)| (n, i));
                                let dense = |n: i64| n >= SEARCH_WALK_AFTER;
                                match counts.first() {
                                    Some(&(rarest, n)) if !dense(n) && !dense(keys) => {
                                        ranged(NameRows::Lead(rarest)).await?
                                    }
                                    None if !dense(keys) => ranged(NameRows::Intersect).await?,
                                    // Dense: the newest operations hold a page, or the name's
                                    // two rarest words are read as one pair.
                                    _ => match walked(SEARCH_WINDOW).await? {
                                        Some(rows) => rows,
                                        None => match counts.get(..2) {
                                            Some([(a, _), (b, _)]) => ranged(NameRows::Pair(*a, *b)).await?,
                                            _ => ranged(NameRows::Intersect).await?,
                                        },
                                    },
                                }
                            }
                        }
                    }
                };
                let mut hits = rows
                    .iter()
                    .map(|r| {
                        let row = SearchRow::read(r)?;
                        let matched = row.matched_by(query);
                        row.hit(matched)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let next = (hits.len() as i64 > limit).then(|| {
                    hits.truncate(limit as usize);
                    let last = &hits[hits.len() - 1];
                    SearchCursor { created_at: last.created_at, operation_id: last.operation_id.clone() }
                });
                Ok(SearchPage { hits, next })
            }
        }
    };
}
pub(crate) use reads_sql;
