//! Access control lists: canned ACLs and `x-amz-grant-*` headers turned into grants, grants
//! turned into S3's XML shapes and back, and the question every request asks of an ACL: does it
//! give this requester this permission. Pure: resolving canonical ids to users is the caller's.

use s3s::dto;
use s3s::{S3Result, s3_error};

use crate::layout::{Grant, Grantee, Permission};

pub const ALL_USERS_URI: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
pub const AUTHENTICATED_USERS_URI: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
pub const LOG_DELIVERY_URI: &str = "http://acs.amazonaws.com/groups/s3/LogDelivery";

/// Most grants one ACL holds (S3's limit is 100).
pub const MAX_GRANTS: usize = 100;

/// A user as ACLs name it: canonical id and display name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Party {
    pub id: String,
    pub display_name: String,
}

impl Party {
    fn full_control(&self) -> Grant {
        Grant {
            grantee: Grantee::User { id: self.id.clone(), display_name: self.display_name.clone() },
            permission: Permission::FullControl,
        }
    }
}

/// Who is asking: a signed user, or nobody (an anonymous request).
#[derive(Debug, Clone, Copy)]
pub enum Requester<'a> {
    Anonymous,
    User(&'a str),
}

/// The grants of the canned ACL `name` for a resource owned by `owner`; `bucket_owner` is the
/// owner of the bucket an object is in (`None` for a bucket, where the `bucket-owner-*` names
/// do not apply). Group grants come first, as S3 lists them.
pub fn canned(name: &str, owner: &Party, bucket_owner: Option<&Party>) -> S3Result<Vec<Grant>> {
    let group = |grantee: Grantee, permission| Grant { grantee, permission };
    let mut grants = match name {
        "private" | "aws-exec-read" => Vec::new(),
        "public-read" => vec![group(Grantee::AllUsers, Permission::Read)],
        "public-read-write" => {
            vec![group(Grantee::AllUsers, Permission::Read), group(Grantee::AllUsers, Permission::Write)]
        }
        "authenticated-read" => vec![group(Grantee::AuthenticatedUsers, Permission::Read)],
        "log-delivery-write" if bucket_owner.is_none() => {
            vec![group(Grantee::LogDelivery, Permission::Write), group(Grantee::LogDelivery, Permission::ReadAcp)]
        }
        "bucket-owner-read" | "bucket-owner-full-control" if bucket_owner.is_some() => Vec::new(),
        other => return Err(s3_error!(InvalidArgument, "unknown canned ACL {other:?}")),
    };
    grants.push(owner.full_control());
    if let Some(b) = bucket_owner
        && b.id != owner.id
    {
        let grantee = Grantee::User { id: b.id.clone(), display_name: b.display_name.clone() };
        match name {
            "bucket-owner-read" => grants.push(Grant { grantee, permission: Permission::Read }),
            "bucket-owner-full-control" => grants.push(Grant { grantee, permission: Permission::FullControl }),
            _ => {}
        }
    }
    Ok(grants)
}

/// The grant headers, in the order S3 lists their permissions.
pub const GRANT_HEADERS: [(&str, Permission); 5] = [
    ("x-amz-grant-read", Permission::Read),
    ("x-amz-grant-write", Permission::Write),
    ("x-amz-grant-read-acp", Permission::ReadAcp),
    ("x-amz-grant-write-acp", Permission::WriteAcp),
    ("x-amz-grant-full-control", Permission::FullControl),
];

/// A grantee named in a grant header or an ACL document, before users are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Id(String),
    Email(String),
    Group(Grantee),
}

/// Parses the value of one `x-amz-grant-*` header: `id="..."`, `uri="..."` or
/// `emailAddress="..."`, separated by commas.
pub fn parse_grant_header(value: &str) -> S3Result<Vec<Named>> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((kind, v)) = item.split_once('=') else {
            return Err(s3_error!(InvalidArgument, "grant {item:?} is not type=value"));
        };
        let v = v.trim().trim_matches('"');
        match kind.trim().to_ascii_lowercase().as_str() {
            "id" => out.push(Named::Id(v.to_string())),
            "emailaddress" => out.push(Named::Email(v.to_string())),
            "uri" => out.push(Named::Group(group_of(v)?)),
            other => return Err(s3_error!(InvalidArgument, "unknown grantee type {other:?}")),
        }
    }
    Ok(out)
}

fn group_of(uri: &str) -> S3Result<Grantee> {
    match uri {
        ALL_USERS_URI => Ok(Grantee::AllUsers),
        AUTHENTICATED_USERS_URI => Ok(Grantee::AuthenticatedUsers),
        LOG_DELIVERY_URI => Ok(Grantee::LogDelivery),
        other => Err(s3_error!(InvalidArgument, "unknown group {other:?}")),
    }
}

fn permission_of(p: &dto::Permission) -> S3Result<Permission> {
    Ok(match p.as_str() {
        dto::Permission::READ => Permission::Read,
        dto::Permission::WRITE => Permission::Write,
        dto::Permission::READ_ACP => Permission::ReadAcp,
        dto::Permission::WRITE_ACP => Permission::WriteAcp,
        dto::Permission::FULL_CONTROL => Permission::FullControl,
        other => return Err(s3_error!(MalformedACLError, "unknown permission {other:?}")),
    })
}

fn permission_name(p: Permission) -> &'static str {
    match p {
        Permission::Read => dto::Permission::READ,
        Permission::Write => dto::Permission::WRITE,
        Permission::ReadAcp => dto::Permission::READ_ACP,
        Permission::WriteAcp => dto::Permission::WRITE_ACP,
        Permission::FullControl => dto::Permission::FULL_CONTROL,
    }
}

/// The grants of an ACL document (PutBucketAcl / PutObjectAcl body), unresolved. Its owner, if
/// it names one, must be the resource's.
pub fn parse_policy(policy: &dto::AccessControlPolicy, owner_id: &str) -> S3Result<Vec<(Named, Permission)>> {
    if let Some(id) = policy.owner.as_ref().and_then(|o| o.id.as_deref())
        && id != owner_id
    {
        return Err(s3_error!(AccessDenied, "the ACL names an owner other than the resource's"));
    }
    let grants = policy.grants.as_deref().unwrap_or(&[]);
    if grants.len() > MAX_GRANTS {
        return Err(s3_error!(MalformedACLError, "an ACL holds at most {MAX_GRANTS} grants"));
    }
    let mut out = Vec::with_capacity(grants.len());
    for g in grants {
        let (Some(grantee), Some(permission)) = (&g.grantee, &g.permission) else {
            return Err(s3_error!(MalformedACLError, "a grant needs a grantee and a permission"));
        };
        let named = match grantee.type_.as_str() {
            dto::Type::CANONICAL_USER => match &grantee.id {
                Some(id) => Named::Id(id.clone()),
                None => return Err(s3_error!(InvalidArgument, "a CanonicalUser grantee needs an ID")),
            },
            dto::Type::AMAZON_CUSTOMER_BY_EMAIL => match &grantee.email_address {
                Some(e) => Named::Email(e.clone()),
                None => return Err(s3_error!(InvalidArgument, "an email grantee needs an EmailAddress")),
            },
            dto::Type::GROUP => match &grantee.uri {
                Some(uri) => Named::Group(group_of(uri)?),
                None => return Err(s3_error!(InvalidArgument, "a Group grantee needs a URI")),
            },
            other => return Err(s3_error!(MalformedACLError, "unknown grantee type {other:?}")),
        };
        out.push((named, permission_of(permission)?));
    }
    Ok(out)
}

/// Grants as S3 returns them: group grants first, then users', each in the order set.
pub fn to_dto(grants: &[Grant]) -> dto::Grants {
    let (users, groups): (Vec<&Grant>, Vec<&Grant>) =
        grants.iter().partition(|g| matches!(g.grantee, Grantee::User { .. }));
    groups
        .into_iter()
        .chain(users)
        .map(|g| {
            let (type_, id, display_name, uri) = match &g.grantee {
                Grantee::User { id, display_name } => {
                    (dto::Type::CANONICAL_USER, Some(id.clone()), Some(display_name.clone()), None)
                }
                Grantee::AllUsers => (dto::Type::GROUP, None, None, Some(ALL_USERS_URI.to_string())),
                Grantee::AuthenticatedUsers => {
                    (dto::Type::GROUP, None, None, Some(AUTHENTICATED_USERS_URI.to_string()))
                }
                Grantee::LogDelivery => (dto::Type::GROUP, None, None, Some(LOG_DELIVERY_URI.to_string())),
            };
            dto::Grant {
                grantee: Some(dto::Grantee {
                    display_name,
                    email_address: None,
                    id,
                    type_: dto::Type::from(type_.to_string()),
                    uri,
                }),
                permission: Some(dto::Permission::from(permission_name(g.permission).to_string())),
            }
        })
        .collect()
}

/// Whether `grants` give `who` permission `want` (FULL_CONTROL gives every permission).
pub fn allows(grants: &[Grant], who: Requester<'_>, want: Permission) -> bool {
    grants.iter().any(|g| {
        let covers = g.permission == want || g.permission == Permission::FullControl;
        let matches = match (&g.grantee, who) {
            (Grantee::AllUsers, _) => true,
            (Grantee::AuthenticatedUsers, Requester::User(_)) => true,
            (Grantee::User { id, .. }, Requester::User(me)) => id == me,
            _ => false,
        };
        covers && matches
    })
}

/// Whether `grants` give anything to everyone or to every signed user (a public ACL, as
/// GetBucketPolicyStatus and public access blocks judge it).
pub fn is_public(grants: &[Grant]) -> bool {
    grants.iter().any(|g| matches!(g.grantee, Grantee::AllUsers | Grantee::AuthenticatedUsers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn party(id: &str) -> Party {
        Party { id: id.into(), display_name: id.to_uppercase() }
    }

    #[test]
    fn canned_acls_give_what_their_names_say() {
        let owner = party("o");
        let private = canned("private", &owner, None).unwrap();
        assert!(allows(&private, Requester::User("o"), Permission::Write));
        assert!(!allows(&private, Requester::User("x"), Permission::Read));
        assert!(!allows(&private, Requester::Anonymous, Permission::Read));

        let public = canned("public-read", &owner, None).unwrap();
        assert!(allows(&public, Requester::Anonymous, Permission::Read));
        assert!(!allows(&public, Requester::Anonymous, Permission::Write));
        assert!(is_public(&public) && !is_public(&private));

        let prw = canned("public-read-write", &owner, None).unwrap();
        assert!(allows(&prw, Requester::User("x"), Permission::Write));
        assert!(!allows(&prw, Requester::User("x"), Permission::WriteAcp));

        let auth = canned("authenticated-read", &owner, None).unwrap();
        assert!(allows(&auth, Requester::User("x"), Permission::Read));
        assert!(!allows(&auth, Requester::Anonymous, Permission::Read));

        let b = party("b");
        let bor = canned("bucket-owner-read", &owner, Some(&b)).unwrap();
        assert!(allows(&bor, Requester::User("b"), Permission::Read));
        assert!(!allows(&bor, Requester::User("b"), Permission::ReadAcp));
        let bofc = canned("bucket-owner-full-control", &owner, Some(&b)).unwrap();
        assert!(allows(&bofc, Requester::User("b"), Permission::WriteAcp));
        // The bucket owner writing its own object gets one grant, not two.
        assert_eq!(canned("bucket-owner-full-control", &b, Some(&b)).unwrap().len(), 1);

        assert!(canned("public-write", &owner, None).is_err());
        assert!(canned("bucket-owner-read", &owner, None).is_err(), "not a bucket ACL");
        assert!(canned("log-delivery-write", &owner, Some(&b)).is_err(), "not an object ACL");
    }

    #[test]
    fn grant_headers_parse_and_refuse_garbage() {
        let got = parse_grant_header(&format!(r#"id="abc", uri="{ALL_USERS_URI}",emailAddress=a@b.c"#)).unwrap();
        assert_eq!(got, vec![Named::Id("abc".into()), Named::Group(Grantee::AllUsers), Named::Email("a@b.c".into())]);
        assert!(parse_grant_header("abc").is_err());
        assert!(parse_grant_header("uri=http://example.invalid/group").is_err());
        assert!(parse_grant_header("name=x").is_err());
    }

    #[test]
    fn grants_round_trip_through_s3_shapes() {
        let owner = party("o");
        let grants = canned("public-read-write", &owner, None).unwrap();
        let policy = dto::AccessControlPolicy {
            grants: Some(to_dto(&grants)),
            owner: Some(dto::Owner { id: Some("o".into()), display_name: None }),
        };
        let parsed = parse_policy(&policy, "o").unwrap();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[0], (Named::Group(Grantee::AllUsers), Permission::Read));
        assert_eq!(parsed[2], (Named::Id("o".into()), Permission::FullControl));
        assert!(parse_policy(&policy, "someone-else").is_err(), "owner must be the resource's");
    }
}
