//! The masters a host may dial, and which one it dials next.
//!
//! `host.master` names one master (`10.0.0.1:7700`) or several, comma
//! separated (`10.0.0.1:7700, 10.0.0.2:7700`): one leads, the others are
//! standbys that answer a host with [`MasterMessage::Standby`] in place of
//! the challenge, naming the leader when one leads.
//!
//! [`MasterChoice`] is the whole dialling policy, over plain data so it is
//! tested without sockets: addresses are tried in order; a standby's hint is
//! followed at once when it is one of the configured addresses; the backoff
//! is slept only once a *pass* (every address tried since the last welcome
//! or backoff) has failed; and after a lost connection the next pass starts
//! from the master the host was connected to. One address behaves as a
//! single master always did: every failure ends a pass.
//!
//! [`MasterMessage::Standby`]: trainyard_proto::messages::MasterMessage::Standby

/// The configured master addresses: at least one, none empty, trimmed, in
/// the operator's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterAddrs(Vec<String>);

/// A `host.master` value the host cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MasterListError {
    #[error("host.master is empty: give the master's host address, host:port")]
    Empty,
    #[error(
        "host.master {list:?}: address {position} of the list is empty; \
         separate addresses with single commas, e.g. \"10.0.0.1:7700,10.0.0.2:7700\""
    )]
    EmptyEntry { list: String, position: usize },
}

impl MasterAddrs {
    /// Reads a comma-separated list; whitespace around the commas is
    /// dropped, an empty entry (`"a,,b"`, a trailing comma) is an error.
    pub fn parse(list: &str) -> Result<Self, MasterListError> {
        if list.trim().is_empty() {
            return Err(MasterListError::Empty);
        }
        let addrs = list
            .split(',')
            .enumerate()
            .map(|(i, entry)| match entry.trim() {
                "" => Err(MasterListError::EmptyEntry {
                    list: list.to_string(),
                    position: i + 1,
                }),
                addr => Ok(addr.to_string()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self(addrs))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// Where `addr` (trimmed, matched exactly) sits in the list.
    pub fn position(&self, addr: &str) -> Option<usize> {
        let addr = addr.trim();
        self.0.iter().position(|a| a == addr)
    }
}

impl std::fmt::Display for MasterAddrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

/// How the last try at the current address ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// No welcome: connect, TLS or handshake failure, refusal, timeout.
    Failed,
    /// A standby answered, naming the leader's host address if one leads.
    Standby { leader: Option<&'a str> },
    /// The master had welcomed the host, and the connection ended.
    Lost,
}

/// When to dial [`MasterChoice::current`] next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Now: the pass goes on.
    Now,
    /// After the backoff delay: the pass is over (or the connection lost).
    Backoff,
}

/// Which master address to dial, pass after pass.
#[derive(Debug, Clone)]
pub struct MasterChoice {
    addrs: MasterAddrs,
    /// The address being (or about to be) dialled.
    current: usize,
    /// Where a pass starts: the master last connected to, at first the
    /// first address.
    home: usize,
    /// Addresses dialled in this pass: a pass ends when none is left.
    tried: Vec<bool>,
    /// Standby hints followed in this pass. Bounded by the list's length,
    /// so standbys with stale hints naming each other cannot keep a host
    /// dialling in a tight loop without ever sleeping the backoff.
    hints_followed: usize,
}

impl MasterChoice {
    pub fn new(addrs: MasterAddrs) -> Self {
        let tried = vec![false; addrs.0.len()];
        Self {
            addrs,
            current: 0,
            home: 0,
            tried,
            hints_followed: 0,
        }
    }

    /// The address to dial.
    pub fn current(&self) -> &str {
        &self.addrs.0[self.current]
    }

    /// Moves on after a try at [`Self::current`] ended with `outcome`, and
    /// says whether to dial the new current address now or after the
    /// backoff.
    pub fn after(&mut self, outcome: Outcome<'_>) -> Step {
        self.tried[self.current] = true;
        match outcome {
            Outcome::Lost => {
                self.home = self.current;
                self.new_pass();
                Step::Backoff
            }
            Outcome::Standby {
                leader: Some(leader),
            } => match self.hinted(leader) {
                Some(next) => {
                    self.hints_followed += 1;
                    self.current = next;
                    Step::Now
                }
                None => self.next_untried(),
            },
            Outcome::Standby { leader: None } | Outcome::Failed => self.next_untried(),
        }
    }

    /// The address a standby's hint names, if the host may follow it: one
    /// of its own, not the standby itself, within this pass's hint budget.
    fn hinted(&self, leader: &str) -> Option<usize> {
        let next = self.addrs.position(leader)?;
        let budget = self.addrs.0.len();
        (next != self.current && self.hints_followed < budget).then_some(next)
    }

    /// The next address after the current one, in list order (wrapping),
    /// not yet dialled in this pass; when none is left, a new pass from
    /// `home` after the backoff.
    fn next_untried(&mut self) -> Step {
        let n = self.addrs.0.len();
        let next = (1..n)
            .map(|k| (self.current + k) % n)
            .find(|&i| !self.tried[i]);
        match next {
            Some(i) => {
                self.current = i;
                Step::Now
            }
            None => {
                self.new_pass();
                Step::Backoff
            }
        }
    }

    fn new_pass(&mut self) {
        self.tried.fill(false);
        self.hints_followed = 0;
        self.current = self.home;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(list: &str) -> MasterChoice {
        MasterChoice::new(MasterAddrs::parse(list).unwrap())
    }

    #[test]
    fn a_list_is_split_on_commas_and_trimmed() {
        let addrs = MasterAddrs::parse(" 10.0.0.1:7700 ,10.0.0.2:7700,\tm3:7700 ").unwrap();
        assert_eq!(
            addrs.as_slice(),
            ["10.0.0.1:7700", "10.0.0.2:7700", "m3:7700"]
        );
        assert_eq!(addrs.position(" m3:7700"), Some(2));
        assert_eq!(addrs.position("m3"), None);
    }

    #[test]
    fn one_address_is_a_list_of_one() {
        let addrs = MasterAddrs::parse("127.0.0.1:7700").unwrap();
        assert_eq!(addrs.as_slice(), ["127.0.0.1:7700"]);
        assert_eq!(addrs.to_string(), "127.0.0.1:7700");
    }

    #[test]
    fn empty_entries_are_refused_with_their_position() {
        for (list, position) in [("a:1,,b:2", 2), ("a:1,", 2), (",a:1", 1), ("a:1, ,b:2", 2)] {
            let e = MasterAddrs::parse(list).unwrap_err();
            assert_eq!(
                e,
                MasterListError::EmptyEntry {
                    list: list.into(),
                    position
                }
            );
            assert!(e.to_string().contains("is empty"), "{e}");
        }
        assert_eq!(MasterAddrs::parse("  "), Err(MasterListError::Empty));
    }

    #[test]
    fn a_failure_moves_to_the_next_address_without_waiting() {
        let mut c = choice("a:1,b:1,c:1");
        assert_eq!(c.current(), "a:1");
        assert_eq!(c.after(Outcome::Failed), Step::Now);
        assert_eq!(c.current(), "b:1");
        assert_eq!(c.after(Outcome::Standby { leader: None }), Step::Now);
        assert_eq!(c.current(), "c:1");
    }

    #[test]
    fn a_full_pass_of_failures_ends_in_the_backoff_then_starts_over() {
        let mut c = choice("a:1,b:1,c:1");
        assert_eq!(c.after(Outcome::Failed), Step::Now);
        assert_eq!(c.after(Outcome::Failed), Step::Now);
        assert_eq!(c.after(Outcome::Failed), Step::Backoff);
        assert_eq!(c.current(), "a:1", "the next pass starts from the first");
        assert_eq!(c.after(Outcome::Failed), Step::Now);
        assert_eq!(c.current(), "b:1");
    }

    #[test]
    fn a_hint_naming_a_configured_address_is_followed_at_once() {
        let mut c = choice("a:1,b:1,c:1");
        assert_eq!(
            c.after(Outcome::Standby {
                leader: Some(" c:1")
            }),
            Step::Now
        );
        assert_eq!(c.current(), "c:1");
    }

    #[test]
    fn a_hint_naming_an_address_not_configured_is_passed_over() {
        let mut c = choice("a:1,b:1,c:1");
        let step = c.after(Outcome::Standby {
            leader: Some("10.9.9.9:7700"),
        });
        assert_eq!((step, c.current()), (Step::Now, "b:1"));
    }

    #[test]
    fn a_hint_to_an_address_already_tried_in_the_pass_is_followed() {
        // a was a standby a moment ago; b says a leads now (it was elected).
        let mut c = choice("a:1,b:1,c:1");
        c.after(Outcome::Standby { leader: None });
        assert_eq!(
            c.after(Outcome::Standby {
                leader: Some("a:1")
            }),
            Step::Now
        );
        assert_eq!(c.current(), "a:1");
        // a fails: c is the only address not tried in this pass.
        assert_eq!(c.after(Outcome::Failed), Step::Now);
        assert_eq!(c.current(), "c:1");
        assert_eq!(c.after(Outcome::Failed), Step::Backoff);
    }

    #[test]
    fn standbys_naming_each_other_end_in_the_backoff() {
        let mut c = choice("a:1,b:1");
        let mut steps = vec![];
        for _ in 0..6 {
            let other = if c.current() == "a:1" { "b:1" } else { "a:1" };
            steps.push(c.after(Outcome::Standby {
                leader: Some(other),
            }));
            if steps.last() == Some(&Step::Backoff) {
                break;
            }
        }
        assert_eq!(steps.last(), Some(&Step::Backoff), "{steps:?}");
        assert!(steps.len() <= 3, "{steps:?}");
    }

    #[test]
    fn a_standby_naming_itself_is_not_redialled_at_once() {
        let mut c = choice("a:1");
        let step = c.after(Outcome::Standby {
            leader: Some("a:1"),
        });
        assert_eq!((step, c.current()), (Step::Backoff, "a:1"));
    }

    #[test]
    fn after_a_lost_connection_the_next_pass_starts_from_the_last_master() {
        let mut c = choice("a:1,b:1,c:1");
        c.after(Outcome::Failed);
        assert_eq!(c.current(), "b:1");
        assert_eq!(c.after(Outcome::Lost), Step::Backoff);
        assert_eq!(c.current(), "b:1");
        assert_eq!(c.after(Outcome::Failed), Step::Now);
        assert_eq!(c.current(), "c:1");
        assert_eq!(c.after(Outcome::Failed), Step::Now);
        assert_eq!(c.current(), "a:1", "then the others, wrapping around");
        assert_eq!(c.after(Outcome::Failed), Step::Backoff);
        assert_eq!(c.current(), "b:1");
    }

    #[test]
    fn one_address_backs_off_after_every_failure_as_before() {
        let mut c = choice("m:7700");
        for outcome in [
            Outcome::Failed,
            Outcome::Lost,
            Outcome::Standby { leader: None },
        ] {
            assert_eq!(c.after(outcome), Step::Backoff);
            assert_eq!(c.current(), "m:7700");
        }
    }
}
