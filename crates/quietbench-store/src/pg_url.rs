//! A PostgreSQL URL taken apart as rust-postgres reads it, for the two things done to it before
//! it is handed over: hiding the password in messages, and taking the TLS settings out. Its
//! rule, followed here: the credentials run to the first `@` (so a password may hold `/` or
//! `?` unescaped), the hosts to the next `/` or `?`, the database to the next `?`.

/// The parts of `postgres://[user[:password]@][host[:port],…][/dbname][?query]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PgUrl<'a> {
    /// `postgres` or `postgresql`.
    pub scheme: &'a str,
    /// `user` or `user:password`, when there is an `@`.
    pub credentials: Option<&'a str>,
    /// The comma-separated hosts and ports; empty for none.
    pub hosts: &'a str,
    /// `/dbname`, or empty.
    pub path: &'a str,
    /// After the `?`, when there is one.
    pub query: Option<&'a str>,
}

impl<'a> PgUrl<'a> {
    /// Parses a `postgres://` or `postgresql://` URL; `None` for anything else.
    pub fn parse(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        if !matches!(scheme, "postgres" | "postgresql") {
            return None;
        }
        let (credentials, rest) = match rest.split_once('@') {
            Some((credentials, rest)) => (Some(credentials), rest),
            None => (None, rest),
        };
        let hosts_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (hosts, rest) = rest.split_at(hosts_end);
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        Some(Self {
            scheme,
            credentials,
            hosts,
            path,
            query,
        })
    }

    /// The query's parameters as written (`key=value`, or a bare `key`).
    pub fn params(&self) -> impl Iterator<Item = &'a str> {
        self.query
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
    }

    /// The query's parameters as (key, value); a bare key has an empty value.
    pub fn pairs(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.params().map(|p| p.split_once('=').unwrap_or((p, "")))
    }

    /// The URL again, with `query` as its query (none when empty).
    pub fn with_query(&self, query: &str) -> String {
        let credentials = self
            .credentials
            .map(|c| format!("{c}@"))
            .unwrap_or_default();
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!(
            "{}://{credentials}{}{}{query}",
            self.scheme, self.hosts, self.path
        )
    }

    /// Every host named, in the authority and in `host=` parameters, `%`-decoded where it
    /// decodes (an undecodable one is kept as written: it is then no socket path).
    pub fn host_names(&self) -> Vec<String> {
        let in_authority = self.hosts.split(',').filter(|h| !h.is_empty()).map(|h| {
            // `[v6]:port` or `host:port`; a socket path is %-encoded, so holds no `:`.
            let host = match h.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap_or(v6),
                None => h.split(':').next().unwrap_or(h),
            };
            decoded(host)
        });
        let in_query = self
            .pairs()
            .filter(|(k, _)| *k == "host")
            .flat_map(|(_, v)| v.split(',').map(decoded).collect::<Vec<_>>());
        in_authority.chain(in_query).collect()
    }

    /// Whether every host is a Unix socket's folder (an absolute path, as rust-postgres and
    /// libpq take it), and there is at least one.
    pub fn only_unix_sockets(&self) -> bool {
        let hosts = self.host_names();
        !hosts.is_empty() && hosts.iter().all(|h| h.starts_with('/'))
    }
}

/// `%XX` escapes decoded; `value` itself when it has a bad escape or is not UTF-8.
fn decoded(value: &str) -> String {
    percent_decoded(value).unwrap_or_else(|_| value.to_string())
}

/// `%XX` escapes decoded, as rust-postgres decodes the URL's values.
pub(super) fn percent_decoded(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in the URL's value {value:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("the URL's value {value:?} is not UTF-8"))
}

/// The URL as messages may show it: a password, in the credentials or a `password=`
/// parameter, becomes `***`. A URL that is not a PostgreSQL one is returned as it is.
pub(super) fn without_password(url: &str) -> String {
    let Some(parsed) = PgUrl::parse(url) else {
        return url.to_string();
    };
    let credentials = parsed.credentials.map(|c| match c.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => c.to_string(),
    });
    let query: Vec<&str> = parsed
        .params()
        .map(|kv| match kv.split_once('=') {
            Some(("password", _)) => "password=***",
            _ => kv,
        })
        .collect();
    let shown = PgUrl {
        credentials: credentials.as_deref(),
        ..parsed
    };
    shown.with_query(&query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_are_found_as_rust_postgres_finds_them() {
        let url =
            PgUrl::parse("postgres://qb:pa/ss?w@db1:5433,db2/results?sslmode=require").unwrap();
        assert_eq!(url.credentials, Some("qb:pa/ss?w"));
        assert_eq!(url.hosts, "db1:5433,db2");
        assert_eq!(url.path, "/results");
        assert_eq!(url.query, Some("sslmode=require"));
        assert_eq!(url.host_names(), ["db1", "db2"]);
        assert_eq!(
            url.with_query("a=1"),
            "postgres://qb:pa/ss?w@db1:5433,db2/results?a=1"
        );
        assert!(PgUrl::parse("mysql://db/x").is_none());
        assert!(PgUrl::parse("/var/lib/results.sqlite3").is_none());
    }

    #[test]
    fn unix_sockets_are_told_from_network_hosts() {
        for (url, sockets) in [
            ("postgresql:///qb?host=/run/postgresql", true),
            ("postgresql://%2Frun%2Fpostgresql/qb", true),
            ("postgres://qb@%2Ftmp%2Fpg:5433/qb", true),
            ("postgresql:///qb?host=/run/a,/run/b", true),
            ("postgresql:///qb?host=/run/a,db.internal", false),
            ("postgres://localhost/qb", false),
            ("postgres://[::1]:5432/qb", false),
            ("postgresql:///qb", false),
        ] {
            assert_eq!(
                PgUrl::parse(url).unwrap().only_unix_sockets(),
                sockets,
                "{url}"
            );
        }
    }

    #[test]
    fn a_password_never_shows() {
        for (url, shown) in [
            (
                "postgres://qb:s3cret@db.internal:5432/results",
                "postgres://qb:***@db.internal:5432/results",
            ),
            (
                "postgresql:///qb?host=/tmp/pg&user=x&password=s3cret",
                "postgresql:///qb?host=/tmp/pg&user=x&password=***",
            ),
            ("postgres://qb@db/results", "postgres://qb@db/results"),
            // Unescaped `/` and `?` in a password (base64 makes them): rust-postgres reads up
            // to the first `@`, and so does this.
            (
                "postgres://ci:ab/c+d?e=@db/q?sslmode=require",
                "postgres://ci:***@db/q?sslmode=require",
            ),
            ("postgres://db/q?flag&x=1", "postgres://db/q?flag&x=1"),
        ] {
            assert_eq!(without_password(url), shown, "{url}");
        }
    }
}
