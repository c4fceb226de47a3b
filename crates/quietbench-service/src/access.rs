//! Whose runs a caller sees. A run belongs to the caller that submitted it; a caller sees and
//! acts on its own runs only, an admin on every run (and on the store's runs no service
//! submitted). A run the caller may not see is answered exactly as one that does not exist
//! (NOT_FOUND, the same words), so a caller learns nothing of others' run ids. Ids are whole:
//! a prefix would let a caller probe for others' ids one character at a time, and completing
//! it would pick among runs the caller may not know of.

use tonic::{Request, Status};

use super::auth::Caller;
use super::policy::Policy;
use super::state::Submission;

/// The caller of one request, and what the policy makes of it.
#[derive(Debug, Clone)]
pub struct Access {
    /// Who calls.
    pub caller: Caller,
    /// Whether it sees every run.
    pub admin: bool,
}

impl Access {
    /// The access of `request`'s caller, which the service's interceptor recorded; a request
    /// without one did not pass it and is refused.
    pub fn of<T>(request: &Request<T>, policy: &Policy) -> Result<Self, Status> {
        let caller = request
            .extensions()
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| Status::unauthenticated("the caller is unknown"))?;
        let admin = policy.is_admin(&caller.id);
        Ok(Self { caller, admin })
    }

    /// Whether the caller sees `submission`: its own, or any for an admin. Runs submitted
    /// before owners were kept are the admins'.
    pub fn sees(&self, submission: &Submission) -> bool {
        self.admin || submission.owner.as_deref() == Some(self.caller.id.as_str())
    }

    /// NOT_FOUND for `run_id`, in words that do not depend on whether it exists.
    pub fn not_found(&self, run_id: &str) -> Status {
        if self.admin {
            Status::not_found(format!("no run {run_id} on this service or in its store"))
        } else {
            Status::not_found(format!(
                "no run {run_id} among yours ({}) on this service",
                self.caller.id
            ))
        }
    }
}

/// The length of a whole run id (a UUID as `quietbench runs` prints it).
const WHOLE_ID_LEN: usize = 36;

/// A whole run id: bounded, only the characters ids have, and all of them.
pub fn whole_run_id(given: &str) -> Result<(), Status> {
    if given.is_empty()
        || given.len() > 64
        || !given.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
    {
        return Err(Status::invalid_argument(format!(
            "'{}' is not a run id (hex digits and '-', as `quietbench runs` lists them)",
            given.chars().take(80).collect::<String>()
        )));
    }
    if given.len() != WHOLE_ID_LEN || uuid::Uuid::try_parse(given).is_err() {
        return Err(Status::invalid_argument(format!(
            "'{given}' is not a whole run id: the service takes the whole id ({WHOLE_ID_LEN} \
             characters, as the submit answered it and `quietbench runs --controller` lists \
             it), never a prefix"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(caller: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(id) = caller {
            request.extensions_mut().insert(Caller { id: id.into() });
        }
        request
    }

    #[test]
    fn ids_are_whole_bounded_and_plain() {
        assert!(whole_run_id("4f2a9c1e-0b6d-4e8a-9f3c-2d7b5a1e6c40").is_ok());
        for bad in ["", "../etc", "--json=x", &"a".repeat(65), "id\n"] {
            let err = whole_run_id(bad).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad:?}");
            assert!(err.message().contains("is not a run id"), "{bad:?}");
        }
        for prefix in ["4f2a", "4f2a9c1e", "4f2a9c1e-0b6d-4e8a-9f3c-2d7b5a1e6c4"] {
            let err = whole_run_id(prefix).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(
                err.message().contains("never a prefix"),
                "{}",
                err.message()
            );
        }
        // 36 characters of the right kind but not a UUID's shape.
        assert!(whole_run_id(&"a".repeat(36)).is_err());
    }

    #[test]
    fn callers_see_their_own_runs_and_admins_every_run() {
        let policy = Policy::parse("admins = [\"client ops\"]\n", "p.toml", 1000).unwrap();
        let mut mine = Submission::new("r".into(), Vec::new());
        mine.owner = Some("client a".into());
        let before_owners = Submission::new("o".into(), Vec::new());
        let a = Access::of(&request(Some("client a")), &policy).unwrap();
        let b = Access::of(&request(Some("client b")), &policy).unwrap();
        let ops = Access::of(&request(Some("client ops")), &policy).unwrap();
        assert!(a.sees(&mine) && !a.sees(&before_owners));
        assert!(!b.sees(&mine) && !b.sees(&before_owners));
        assert!(ops.sees(&mine) && ops.sees(&before_owners));
        // Not found reads the same for a run of someone else's and for no run at all.
        assert_eq!(
            b.not_found("x").message(),
            "no run x among yours (client b) on this service"
        );
        assert_eq!(
            Access::of(&request(None), &policy).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }
}
