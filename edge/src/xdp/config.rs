//! The program's configuration words (`qdns_abi::answer::CONFIG_MAP`) and switches:
//! NSID, cookie secrets and clock, the rate limiter, the active generation word.
use aya::maps::Array;
use qdns_abi::answer::{CONFIG_ACTIVE, CONFIG_MAP, CONFIG_NSID};

use super::{map_error, XdpProgram, XdpTableError};

impl XdpProgram {
    /// With `on`, queries carrying an NSID option pass to user space (which answers
    /// them with the edge's NSID, RFC 5001); without, the option is ignored in both paths.
    pub fn set_nsid(&mut self, on: bool) -> Result<(), XdpTableError> {
        let mut config = Array::<_, u64>::try_from(self.map(CONFIG_MAP)?).map_err(map_error(CONFIG_MAP))?;
        config.set(CONFIG_NSID, u64::from(on), 0).map_err(map_error(CONFIG_MAP))
    }

    /// Gives the program the location's cookie secrets (`qdns_abi::cookie`; without
    /// `COOKIES_ON` in their flags, the program ignores COOKIE options as user space
    /// does with `--no-cookies`).
    pub fn set_cookie_secrets(&mut self, secrets: &qdns_abi::cookie::CookieSecrets) -> Result<(), XdpTableError> {
        use qdns_abi::cookie::COOKIE_MAP;
        // The spare entry, then the flip: a program run reads one pair whole.
        let spare = 1 - self.cookie_slot;
        let mut map = Array::<_, qdns_abi::cookie::CookieSecrets>::try_from(self.map(COOKIE_MAP)?)
            .map_err(map_error(COOKIE_MAP))?;
        map.set(spare, *secrets, 0).map_err(map_error(COOKIE_MAP))?;
        self.set_config(qdns_abi::answer::CONFIG_COOKIE_SLOT, u64::from(spare))?;
        self.cookie_slot = spare;
        Ok(())
    }

    /// Sets the cookie clock: the second the program stamps server cookies with (user
    /// space's, so both paths make the same cookie).
    pub fn set_cookie_clock(&mut self, now: u32) -> Result<(), XdpTableError> {
        self.set_config(qdns_abi::answer::CONFIG_COOKIE_CLOCK, u64::from(now))
    }

    /// Sets the response rate limiter (`qdns_abi::rrl`; `interval_ns` 0 = off). The
    /// settings words are written before the interval, which switches it on.
    pub fn set_rrl(&mut self, settings: &qdns_abi::rrl::RrlSettings) -> Result<(), XdpTableError> {
        use qdns_abi::answer::CONFIG_RRL;
        let mut config = Array::<_, u64>::try_from(self.map(CONFIG_MAP)?).map_err(map_error(CONFIG_MAP))?;
        for (offset, value) in [
            (1, settings.slip),
            (2, u64::from(settings.v4_mask)),
            (3, settings.v6_mask),
            (4, settings.seed),
            (0, settings.interval_ns),
        ] {
            config
                .set(CONFIG_RRL + offset, value, 0)
                .map_err(map_error(CONFIG_MAP))?;
        }
        Ok(())
    }

    /// One 8-byte store: the program sees the old or the new word whole.
    pub(super) fn set_active(&mut self, word: u64) -> Result<(), XdpTableError> {
        self.set_config(CONFIG_ACTIVE, word)
    }

    pub(super) fn set_config(&mut self, index: u32, word: u64) -> Result<(), XdpTableError> {
        let mut config = Array::<_, u64>::try_from(self.map(CONFIG_MAP)?).map_err(map_error(CONFIG_MAP))?;
        config.set(index, word, 0).map_err(map_error(CONFIG_MAP))
    }
}
