//! Text that comes in from outside and text that goes out to a person: what a CRM id may
//! be, contact data masked in a message support reads, and stored text made safe to
//! print on a terminal.
//!
//! A `crm_id` that comes in — the claim API's `complete`, a person's *Confirm* or *Link*,
//! a raw request — passes [`check_crm_id`] (at most 256 characters, no control or
//! invisible character: the HTTP answer `invalid_crm_id`, the refusal `crm_id_invalid`,
//! the database's check of a request). A `fail` text and a connector's reason, which
//! support reads, have phone numbers and e-mail addresses masked ([`mask_contacts`]). The
//! CLI prints stored text through [`escape_controls`] (`ops show`, `ops find`,
//! `connector list`), so a source cannot steer a terminal.

use std::borrow::Cow;
use std::fmt::Write;

/// The longest CRM id accepted (claim API, console, CLI, a person's request): CRM ids
/// are numbers or short codes; anything longer is a mistake or an attack.
pub const MAX_CRM_ID_CHARS: usize = 256;

/// Why a CRM id that came in was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrmIdError {
    #[error("the CRM id is empty")]
    Empty,
    #[error("the CRM id is {0} characters long; at most {max} are allowed", max = MAX_CRM_ID_CHARS)]
    TooLong(usize),
    #[error("the CRM id contains a control character")]
    ControlCharacter,
    #[error("the CRM id contains an invisible character (zero-width or a bidirectional control)")]
    InvisibleCharacter,
}

/// Checks a CRM id that came in (already trimmed by the caller): not empty, at most
/// [`MAX_CRM_ID_CHARS`] characters, printable.
pub fn check_crm_id(crm_id: &str) -> Result<(), CrmIdError> {
    if crm_id.trim().is_empty() {
        return Err(CrmIdError::Empty);
    }
    let chars = crm_id.chars().count();
    if chars > MAX_CRM_ID_CHARS {
        return Err(CrmIdError::TooLong(chars));
    }
    if crm_id.chars().any(char::is_control) {
        return Err(CrmIdError::ControlCharacter);
    }
    if crm_id.chars().any(super::ids::is_invisible) {
        return Err(CrmIdError::InvisibleCharacter);
    }
    Ok(())
}

/// The longest reason a person gives for pausing a connector by hand: a sentence or two
/// ("the portal moves to a new plan until 22:00"), read on the dashboard and in alerts.
pub const MAX_PAUSE_REASON_CHARS: usize = 500;

/// Checks the reason of a pause by hand (already trimmed by the caller): said, at most
/// [`MAX_PAUSE_REASON_CHARS`] characters, printable (a line break is allowed). The
/// database checks a person's request the same way (migration 0030).
pub fn check_pause_reason(reason: &str) -> Result<(), crate::Refusal> {
    if reason.trim().is_empty() {
        return Err(crate::Refusal::PauseReasonRequired);
    }
    let printable = |c: char| (!c.is_control() || c == '\n') && !super::ids::is_invisible(c);
    if reason.chars().count() > MAX_PAUSE_REASON_CHARS || !reason.chars().all(printable) {
        return Err(crate::Refusal::PauseReasonInvalid {
            most: MAX_PAUSE_REASON_CHARS,
        });
    }
    Ok(())
}

/// Stored text as a terminal should show it: control characters and invisible
/// formatting characters (bidirectional overrides, zero-width) become `\u{…}` escapes,
/// so a stored value can neither move the cursor, recolour the screen nor hide itself.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || super::ids::is_invisible(c);
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// What a masked e-mail address becomes.
pub const MASKED_EMAIL: &str = "***@***";
/// What a masked phone number becomes.
pub const MASKED_PHONE: &str = "***";

/// A message with everything that looks like an e-mail address or a phone number (seven
/// digits or more, with the usual separators) masked: for text an integration sends
/// about a lead (the claim API's `fail`), which support reads as a connector's reason.
/// It masks more than contact data (any long number), never less.
pub fn mask_contacts(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let masked_emails = mask_emails(&chars);
    mask_phones(&masked_emails)
}

fn mask_emails(chars: &[char]) -> Vec<char> {
    let local = |c: char| c.is_alphanumeric() || "._%+-'".contains(c);
    let domain = |c: char| c.is_alphanumeric() || c == '.' || c == '-';
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '@' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        // The local part already copied: how far back it reaches.
        let mut start = out.len();
        while start > 0 && local(out[start - 1]) {
            start -= 1;
        }
        let mut end = i + 1;
        while end < chars.len() && domain(chars[end]) {
            end += 1;
        }
        let host: String = chars[i + 1..end].iter().collect();
        let host = host.trim_end_matches('.');
        if start < out.len() && host.contains('.') {
            out.truncate(start);
            out.extend(MASKED_EMAIL.chars());
            i = end;
        } else {
            out.push('@');
            i += 1;
        }
    }
    out
}

fn mask_phones(chars: &[char]) -> String {
    let sep = |c: char| matches!(c, ' ' | '-' | '(' | ')' | '.' | '\u{a0}');
    let mut out = String::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at_boundary = i == 0 || !chars[i - 1].is_alphanumeric();
        let starts = c.is_ascii_digit()
            || (matches!(c, '+' | '(') && chars.get(i + 1).is_some_and(char::is_ascii_digit));
        if !(at_boundary && starts) {
            out.push(c);
            i += 1;
            continue;
        }
        let mut j = i + 1;
        let mut digits = usize::from(c.is_ascii_digit());
        let mut last_digit = i;
        while j < chars.len() {
            let d = chars[j];
            if d.is_ascii_digit() {
                digits += 1;
                last_digit = j;
            } else if !sep(d)
                || !chars
                    .get(j + 1)
                    .is_some_and(|n| n.is_ascii_digit() || sep(*n))
            {
                break;
            }
            j += 1;
        }
        let followed_by_word = chars
            .get(last_digit + 1)
            .is_some_and(|n| n.is_alphanumeric());
        if digits >= 7 && !followed_by_word {
            out.push_str(MASKED_PHONE);
            i = last_digit + 1;
        } else {
            out.extend(&chars[i..=last_digit]);
            i = last_digit + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_reason_is_said_short_and_printable() {
        use crate::Refusal;
        assert_eq!(
            check_pause_reason("the portal moves to a new plan until 22:00"),
            Ok(())
        );
        assert_eq!(check_pause_reason("line one\nline two"), Ok(()));
        assert_eq!(
            check_pause_reason(" \n "),
            Err(Refusal::PauseReasonRequired)
        );
        let invalid = Err(Refusal::PauseReasonInvalid { most: 500 });
        assert_eq!(check_pause_reason(&"й".repeat(500)), Ok(()));
        assert_eq!(check_pause_reason(&"й".repeat(501)), invalid);
        assert_eq!(check_pause_reason("tab\there"), invalid);
        assert_eq!(check_pause_reason("hidden\u{202e}text"), invalid);
    }

    #[test]
    fn crm_ids_are_short_and_printable() {
        assert_eq!(check_crm_id("4711"), Ok(()));
        assert_eq!(check_crm_id(&"9".repeat(256)), Ok(()));
        assert_eq!(
            check_crm_id(&"9".repeat(257)),
            Err(CrmIdError::TooLong(257))
        );
        assert_eq!(check_crm_id(" "), Err(CrmIdError::Empty));
        assert_eq!(
            check_crm_id("12\u{1b}[2J"),
            Err(CrmIdError::ControlCharacter)
        );
        assert_eq!(
            check_crm_id("12\u{9b}2J"),
            Err(CrmIdError::ControlCharacter)
        );
        assert_eq!(
            check_crm_id("12\u{202e}34"),
            Err(CrmIdError::InvisibleCharacter)
        );
    }

    #[test]
    fn control_characters_print_as_escapes() {
        assert_eq!(escape_controls("plain 12"), "plain 12");
        assert_eq!(escape_controls("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\u{a}");
        assert_eq!(escape_controls("x\u{202e}y\u{9b}"), "x\\u{202e}y\\u{9b}");
    }

    #[test]
    fn contacts_are_masked_and_the_rest_kept() {
        let cases = [
            (
                "Ivan Petrov +7 (999) 123-45-67 ivan.petrov@example.com: duplicate",
                "Ivan Petrov *** ***@***: duplicate",
            ),
            (
                "phone 89991234567, e-mail a@b.ru",
                "phone ***, e-mail ***@***",
            ),
            ("HTTP 500 after 3 tries", "HTTP 500 after 3 tries"),
            ("field PHONE is required", "field PHONE is required"),
            ("error 0x1234567f", "error 0x1234567f"),
            ("mail@localhost and @user", "mail@localhost and @user"),
            ("+79991234567", "***"),
        ];
        for (text, masked) in cases {
            assert_eq!(mask_contacts(text), masked, "{text}");
        }
    }
}
