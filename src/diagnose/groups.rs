//! Duplicate groups: CRM entities that share a normalized phone or e-mail, directly or
//! through each other (A shares a phone with B, B an e-mail with C: one group).

use std::collections::BTreeMap;

use super::CrmEntity;

/// Entities sharing contact data, oldest first, and what they share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Indexes into the entities given to [`groups`], oldest first.
    pub members: Vec<usize>,
    /// The normalized phones and e-mails held by more than one member.
    pub shared: Vec<String>,
}

fn find(parent: &mut [usize], i: usize) -> usize {
    let mut root = i;
    while parent[root] != root {
        root = parent[root];
    }
    let mut i = i;
    while parent[i] != root {
        let next = parent[i];
        parent[i] = root;
        i = next;
    }
    root
}

/// The groups of two or more entities, ordered by their first member's creation.
pub fn groups(entities: &[CrmEntity]) -> Vec<Group> {
    let mut parent: Vec<usize> = (0..entities.len()).collect();
    let mut holders: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, e) in entities.iter().enumerate() {
        for key in e.phones.iter().chain(&e.emails) {
            let h = holders.entry(key.as_str()).or_default();
            if !h.contains(&i) {
                h.push(i);
            }
        }
    }
    for h in holders.values() {
        for pair in h.windows(2) {
            let (a, b) = (find(&mut parent, pair[0]), find(&mut parent, pair[1]));
            if a != b {
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..entities.len() {
        let root = find(&mut parent, i);
        by_root.entry(root).or_default().push(i);
    }
    let mut out: Vec<Group> = by_root
        .into_values()
        .filter(|m| m.len() > 1)
        .map(|mut members| {
            members.sort_by(|&a, &b| entities[a].order_key().cmp(&entities[b].order_key()));
            let shared = holders
                .iter()
                .filter(|(_, h)| h.len() > 1 && members.contains(&h[0]))
                .map(|(k, _)| (*k).to_owned())
                .collect();
            Group { members, shared }
        })
        .collect();
    out.sort_by(|a, b| {
        entities[a.members[0]]
            .order_key()
            .cmp(&entities[b.members[0]].order_key())
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: &str, minute: u32, phones: &[&str], emails: &[&str]) -> CrmEntity {
        CrmEntity {
            id: id.into(),
            created: Some(format!("2026-11-20T10:{minute:02}:00Z").parse().unwrap()),
            phones: phones.iter().map(|s| s.to_string()).collect(),
            emails: emails.iter().map(|s| s.to_string()).collect(),
            ..CrmEntity::default()
        }
    }

    #[test]
    fn shared_phones_and_emails_chain_into_one_group_oldest_first() {
        let entities = [
            e("10", 5, &["+79990000001"], &[]),
            e("11", 1, &["+79990000001"], &["a@x.ru"]),
            e("12", 9, &[], &["a@x.ru"]),
            e("13", 2, &["+79990000002"], &["b@x.ru"]),
            e("14", 3, &[], &[]),
            e("15", 0, &["+79990000003"], &[]),
            e("16", 7, &["+79990000003"], &[]),
        ];
        let g = groups(&entities);
        assert_eq!(
            g,
            [
                Group {
                    members: vec![5, 6],
                    shared: vec!["+79990000003".into()]
                },
                Group {
                    members: vec![1, 0, 2],
                    shared: vec!["+79990000001".into(), "a@x.ru".into()]
                },
            ]
        );
    }

    #[test]
    fn no_contact_no_group() {
        assert!(groups(&[e("1", 0, &[], &[]), e("2", 0, &[], &[])]).is_empty());
    }
}
