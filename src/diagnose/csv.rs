//! A CSV export of the CRM's leads or deals as [`CrmEntity`]s.
//!
//! Liberal in what it reads: UTF-8 with or without a BOM, `;` or `,` between fields
//! (whichever the header line has more of outside quotes), quoted fields with `""`
//! and line breaks inside, CRLF or LF. Columns are recognised by their header in
//! Bitrix24's and amoCRM's exports, English or Russian (`ID`, `Дата создания`,
//! `Рабочий телефон`, `Мобильный телефон (контакт)`, `E-mail`, `Источник`,
//! `ORIGIN_ID`…); every phone and e-mail column counts, and a cell may hold several
//! values separated by `,` or `;`.

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Utc};

use super::CrmEntity;
use crate::domain::contact::{normalize_email, normalize_phone, Region};

/// Why an export cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    #[error("the export is empty")]
    Empty,
    #[error("the export is not UTF-8 text (save it as UTF-8)")]
    NotUtf8,
    #[error("the export has no ID column (headers: {0})")]
    NoId(String),
    #[error("the export has no phone and no e-mail column: duplicates cannot be found")]
    NoContact,
    #[error("a quoted field is not closed (line {0})")]
    Unclosed(usize),
}

/// What a column holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Column {
    Id,
    Created,
    Phone,
    Email,
    Source,
    OriginId,
    OriginatorId,
    Title,
    Name,
    Utm(String),
    Other,
}

/// The column a header names (case, spaces, `_`, `-` and a trailing `(контакт)` /
/// `(contact)` do not matter).
fn column(header: &str) -> Column {
    let h = header
        .trim()
        .trim_start_matches('\u{feff}')
        .to_lowercase()
        .replace(['_', '-', '.'], " ");
    let h = h
        .trim_end_matches("(контакт)")
        .trim_end_matches("(contact)")
        .trim();
    let h: String = h.split_whitespace().collect::<Vec<_>>().join(" ");
    let has = |words: &[&str]| words.iter().any(|w| h.contains(w));
    match h.as_str() {
        "id" | "ид" | "lead id" | "deal id" | "id лида" | "id сделки" | "ид лида" => {
            return Column::Id
        }
        "origin id" | "внешний код" | "внешний id" | "идентификатор элемента в источнике" => {
            return Column::OriginId
        }
        "originator id" | "идентификатор источника данных" => {
            return Column::OriginatorId
        }
        _ => {}
    }
    if let Some(rest) = h.strip_prefix("utm ") {
        return Column::Utm(rest.replace(' ', "_"));
    }
    // Who created or changed it, and descriptions, are not what they name.
    if has(&[
        " by",
        "кем",
        "description",
        "описание",
        "изменен",
        "modified",
        "updated",
    ]) {
        return Column::Other;
    }
    if has(&["date create", "created", "дата создания", "создан"]) {
        Column::Created
    } else if has(&["phone", "телефон"]) {
        Column::Phone
    } else if has(&["mail", "почта"]) {
        Column::Email
    } else if has(&["source", "источник"]) {
        Column::Source
    } else if has(&["title", "название", "lead name", "deal name"]) {
        Column::Title
    } else if matches!(
        h.as_str(),
        "name" | "first name" | "имя" | "фио" | "контакт" | "contact" | "полное имя"
    ) || has(&["full name", "основной контакт"])
    {
        Column::Name
    } else {
        Column::Other
    }
}

/// Splits `text` into records of fields (RFC 4180 with `delimiter`).
fn records(text: &str, delimiter: char) -> Result<Vec<Vec<String>>, CsvError> {
    let mut out = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut line = 1;
    let mut chars = text.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        any = true;
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => quoted = true,
            c if c == delimiter => record.push(std::mem::take(&mut field)),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' => {
                line += 1;
                record.push(std::mem::take(&mut field));
                out.push(std::mem::take(&mut record));
                any = false;
            }
            _ => field.push(c),
        }
    }
    if quoted {
        return Err(CsvError::Unclosed(line));
    }
    if any {
        record.push(field);
        out.push(record);
    }
    out.retain(|r| r.iter().any(|f| !f.trim().is_empty()));
    Ok(out)
}

/// `;` or `,`: whichever the first line has more of outside quotes.
fn delimiter(text: &str) -> char {
    let (mut semi, mut comma, mut quoted) = (0, 0, false);
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            ';' if !quoted => semi += 1,
            ',' if !quoted => comma += 1,
            '\n' if !quoted => break,
            _ => {}
        }
    }
    if semi > comma {
        ';'
    } else {
        ','
    }
}

/// A created time as exports write it: RFC 3339, `2026-11-20 10:15[:00]`,
/// `20.11.2026 10:15[:00]`, `20.11.2026`; times without an offset are at `offset`
/// (the portal's time zone).
pub fn parse_time(raw: &str, offset: FixedOffset) -> Option<DateTime<Utc>> {
    let t = raw.trim();
    if t.is_empty() {
        return None;
    }
    if let Ok(d) = DateTime::parse_from_rfc3339(t) {
        return Some(d.with_timezone(&Utc));
    }
    const FORMATS: &[&str] = &[
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%d.%m.%Y %H:%M:%S",
        "%d.%m.%Y %H:%M",
        "%d/%m/%Y %H:%M:%S",
        "%d/%m/%Y %H:%M",
    ];
    let naive = FORMATS
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
        .or_else(|| {
            ["%Y-%m-%d", "%d.%m.%Y"]
                .iter()
                .find_map(|f| NaiveDate::parse_from_str(t, f).ok())
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })?;
    offset
        .from_local_datetime(&naive)
        .single()
        .map(|d| d.with_timezone(&Utc))
}

/// The values of one cell: several phones or e-mails may share it.
fn values(cell: &str) -> impl Iterator<Item = &str> {
    cell.split([',', ';', '\n'])
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Reads an export. Rows without an id are skipped; ids repeated (an entity on two
/// lines, as amoCRM exports a deal with two contacts) are merged.
pub fn read(bytes: &[u8], region: Region, offset: FixedOffset) -> Result<Vec<CrmEntity>, CsvError> {
    let text = std::str::from_utf8(bytes).map_err(|_| CsvError::NotUtf8)?;
    let text = text.trim_start_matches('\u{feff}');
    if text.trim().is_empty() {
        return Err(CsvError::Empty);
    }
    let rows = records(text, delimiter(text))?;
    let Some((header, rows)) = rows.split_first() else {
        return Err(CsvError::Empty);
    };
    let columns: Vec<Column> = header.iter().map(|h| column(h)).collect();
    let Some(id_col) = columns.iter().position(|c| *c == Column::Id) else {
        return Err(CsvError::NoId(header.join(", ")));
    };
    if !columns
        .iter()
        .any(|c| matches!(c, Column::Phone | Column::Email))
    {
        return Err(CsvError::NoContact);
    }
    let mut by_id: BTreeMap<String, CrmEntity> = BTreeMap::new();
    let mut order = Vec::new();
    for row in rows {
        let Some(id) = row.get(id_col).map(|s| s.trim()).filter(|s| !s.is_empty()) else {
            continue;
        };
        if !by_id.contains_key(id) {
            order.push(id.to_owned());
        }
        let e = by_id.entry(id.to_owned()).or_insert_with(|| CrmEntity {
            id: id.to_owned(),
            ..CrmEntity::default()
        });
        for (col, cell) in columns.iter().zip(row) {
            let cell = cell.trim();
            if cell.is_empty() {
                continue;
            }
            let set = |slot: &mut Option<String>| {
                slot.get_or_insert_with(|| cell.to_owned());
            };
            match col {
                Column::Id | Column::Other => {}
                Column::Created => {
                    if e.created.is_none() {
                        e.created = parse_time(cell, offset);
                    }
                }
                Column::Phone => e.phones.extend(
                    values(cell)
                        .map(|raw| normalize_phone(raw, region).unwrap_or_else(|| raw.to_owned())),
                ),
                Column::Email => e.emails.extend(values(cell).filter_map(normalize_email)),
                Column::Source => set(&mut e.source),
                Column::OriginId => set(&mut e.origin_id),
                Column::OriginatorId => set(&mut e.originator_id),
                Column::Title => set(&mut e.title),
                Column::Name => set(&mut e.name),
                Column::Utm(k) => {
                    e.utm.entry(k.clone()).or_insert_with(|| cell.to_owned());
                }
            }
        }
        e.phones.retain(|p| p.starts_with('+'));
        e.phones.sort();
        e.phones.dedup();
        e.emails.sort();
        e.emails.dedup();
    }
    Ok(order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msk() -> FixedOffset {
        FixedOffset::east_opt(3 * 3600).unwrap()
    }

    #[test]
    fn headers_of_both_crms_in_both_languages_are_recognised() {
        for (h, want) in [
            ("ID", Column::Id),
            ("\u{feff}ID", Column::Id),
            ("Дата создания", Column::Created),
            ("DATE_CREATE", Column::Created),
            ("Created", Column::Created),
            ("Рабочий телефон", Column::Phone),
            ("Мобильный телефон (контакт)", Column::Phone),
            ("Work Phone", Column::Phone),
            ("Рабочий e-mail", Column::Email),
            ("Рабочий email (контакт)", Column::Email),
            ("EMAIL", Column::Email),
            ("Источник", Column::Source),
            ("SOURCE_ID", Column::Source),
            ("ORIGIN_ID", Column::OriginId),
            ("Внешний код", Column::OriginId),
            ("ORIGINATOR_ID", Column::OriginatorId),
            ("Название лида", Column::Title),
            ("Название сделки", Column::Title),
            ("Имя", Column::Name),
            ("utm_source", Column::Utm("source".into())),
            ("UTM Campaign", Column::Utm("campaign".into())),
            ("Ответственный", Column::Other),
            ("Кем создан", Column::Other),
            ("Created by", Column::Other),
            ("Описание источника", Column::Other),
        ] {
            assert_eq!(column(h), want, "{h}");
        }
    }

    #[test]
    fn quoted_fields_semicolons_and_line_breaks() {
        let text = "ID;Название;Телефон\r\n1;\"Заявка; \"\"срочно\"\"\";+7 999 111-22-33\r\n2;\"две\nстроки\";\n";
        assert_eq!(delimiter(text), ';');
        let r = records(text, ';').unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[1], ["1", "Заявка; \"срочно\"", "+7 999 111-22-33"]);
        assert_eq!(r[2], ["2", "две\nстроки", ""]);
        assert_eq!(records("a,\"b", ','), Err(CsvError::Unclosed(1)));
        assert_eq!(delimiter("ID,\"a;b;c\",Phone\n"), ',');
    }

    #[test]
    fn export_times_in_the_portal_zone() {
        let want: DateTime<Utc> = "2026-11-20T07:15:00Z".parse().unwrap();
        for raw in [
            "20.11.2026 10:15:00",
            "20.11.2026 10:15",
            "2026-11-20 10:15:00",
            "2026-11-20T10:15:00+03:00",
            "2026-11-20T07:15:00Z",
        ] {
            assert_eq!(parse_time(raw, msk()), Some(want), "{raw}");
        }
        assert_eq!(parse_time("вчера", msk()), None);
    }

    #[test]
    fn an_amocrm_deals_export_with_contact_columns_and_a_deal_on_two_lines() {
        let text = "ID,Название сделки,Дата создания,Основной контакт,Рабочий телефон (контакт),\
                    Мобильный телефон (контакт),Рабочий email (контакт),utm_source,Теги\n\
                    9001,Заявка с сайта,2026-11-20 10:15:00,Ирина Соколова,\"+7 (912) 345-67-89\",,irina@example.ru,google,сайт\n\
                    9001,,,,,\"8 912 000 11 22; +7 912 345 67 89\",,,\n\
                    9002,Звонок,2026-11-20 12:00:00,Ирина,,,Irina@Example.ru,,звонок\n";
        let e = read(text.as_bytes(), Region::default(), msk()).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].id, "9001");
        assert_eq!(e[0].title.as_deref(), Some("Заявка с сайта"));
        assert_eq!(e[0].name.as_deref(), Some("Ирина Соколова"));
        assert_eq!(e[0].phones, ["+79120001122", "+79123456789"]);
        assert_eq!(e[0].utm.get("source").map(String::as_str), Some("google"));
        assert_eq!(e[0].created, Some("2026-11-20T07:15:00Z".parse().unwrap()));
        assert_eq!(e[1].emails, ["irina@example.ru"]);
    }

    #[test]
    fn a_bom_phones_in_any_format_and_repeated_ids() {
        let text = "\u{feff}ID,Дата создания,Рабочий телефон,Мобильный телефон,E-mail,Источник\n\
                    7,20.11.2026 10:15,8 (999) 111-22-33,,Ivan@Mail.RU,Сайт\n\
                    7,,,\"+7 999 444 55 66, мусор\",,\n\
                    8,21.11.2026 09:00,,,нет почты,Звонок\n\
                    ,,+79990000000,,,\n";
        let e = read(text.as_bytes(), Region::default(), msk()).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].id, "7");
        assert_eq!(e[0].phones, ["+79991112233", "+79994445566"]);
        assert_eq!(e[0].emails, ["ivan@mail.ru"]);
        assert_eq!(e[0].source.as_deref(), Some("Сайт"));
        assert!(e[1].phones.is_empty() && e[1].emails.is_empty());
        assert_eq!(
            read(b"Name,Phone\nx,1\n", Region::default(), msk()),
            Err(CsvError::NoId("Name, Phone".into()))
        );
        assert_eq!(
            read(b"ID,Name\n1,x\n", Region::default(), msk()),
            Err(CsvError::NoContact)
        );
        assert_eq!(
            read(&[0xff, 0xfe], Region::default(), msk()),
            Err(CsvError::NotUtf8)
        );
    }
}
