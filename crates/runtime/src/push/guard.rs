//! Which addresses a webhook may be delivered to when private destinations are not allowed
//! (on AWS): one judgement, [`refusal`], for a literal address in the URL and for every
//! address a name resolves to. An IPv6 address that embeds an IPv4 one (IPv4-mapped, -translated
//! and -compatible, NAT64, 6to4) is judged by the address it embeds, so a private IPv4 address
//! is not reached through a translator or relay. docs/API.md's push section lists the same
//! ranges.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// IPv4 ranges no webhook is delivered to: (network, prefix length, why).
const V4_REFUSED: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "\"this network\" (0.0.0.0/8)"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private (10.0.0.0/8)"),
    (Ipv4Addr::new(100, 64, 0, 0), 10, "shared address space (100.64.0.0/10)"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback (127.0.0.0/8)"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local, cloud metadata (169.254.0.0/16)"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private (172.16.0.0/12)"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "IETF protocol assignments (192.0.0.0/24)"),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "documentation (192.0.2.0/24)"),
    (Ipv4Addr::new(192, 88, 99, 0), 24, "6to4 relay anycast (192.88.99.0/24)"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private (192.168.0.0/16)"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking (198.18.0.0/15)"),
    (Ipv4Addr::new(198, 51, 100, 0), 24, "documentation (198.51.100.0/24)"),
    (Ipv4Addr::new(203, 0, 113, 0), 24, "documentation (203.0.113.0/24)"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast (224.0.0.0/4)"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved and broadcast (240.0.0.0/4)"),
];

/// IPv6 ranges refused whatever follows the prefix; checked before the embedding forms
/// (`::` and `::1` are inside `::/96`).
const V6_REFUSED: &[(Ipv6Addr, u8, &str)] = &[
    (Ipv6Addr::UNSPECIFIED, 128, "unspecified (::)"),
    (Ipv6Addr::LOCALHOST, 128, "loopback (::1)"),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, "local-use NAT64 (64:ff9b:1::/48)"),
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, "discard-only (100::/64)"),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, "Teredo (2001::/32)"),
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, "documentation (2001:db8::/32)"),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, "unique local (fc00::/7)"),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link-local (fe80::/10)"),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "site-local (fec0::/10)"),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast (ff00::/8)"),
];

/// IPv6 forms that carry an IPv4 address: (network, prefix length, name, the embedded
/// address's first bit counted from the left).
const V6_EMBEDDING: &[(Ipv6Addr, u8, &str, u32)] = &[
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96, "IPv4-mapped", 96),
    (Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96, "IPv4-translated", 96),
    (Ipv6Addr::UNSPECIFIED, 96, "IPv4-compatible", 96),
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, "NAT64", 96),
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, "6to4", 16),
];

/// Why no public service is reached at `ip`, or `None` when one may be.
pub fn refusal(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => v4_refusal(v4).map(str::to_owned),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            if let Some((.., why)) = V6_REFUSED.iter().find(|(net, len, _)| within(bits, u128::from(*net), *len)) {
                return Some((*why).to_owned());
            }
            let (_, _, form, at) = V6_EMBEDDING.iter().find(|(net, len, ..)| within(bits, u128::from(*net), *len))?;
            let embedded = Ipv4Addr::from((bits >> (96 - at)) as u32);
            v4_refusal(embedded).map(|why| format!("{form} {embedded}: {why}"))
        }
    }
}

/// Whether `ip` is an address a public service may be reached at.
pub fn is_public(ip: IpAddr) -> bool {
    refusal(ip).is_none()
}

fn v4_refusal(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u128::from(u32::from(ip)) << 96;
    V4_REFUSED.iter().find(|(net, len, _)| within(bits, u128::from(u32::from(*net)) << 96, *len)).map(|(.., why)| *why)
}

/// Whether `bits` share their first `len` bits with `net` (both left-aligned in 128).
fn within(bits: u128, net: u128, len: u8) -> bool {
    len == 0 || (bits ^ net) >> (128 - u32::from(len)) == 0
}

/// Refuses a URL whose host is a literal non-public address (a name is left to
/// [`PublicOnly`]: no resolver is asked about a literal).
pub fn refuse_private_literal(url: &reqwest::Url) -> Result<(), String> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        _ => return Ok(()),
    };
    match refusal(ip) {
        None => Ok(()),
        Some(why) => {
            Err(format!("refused: {ip} is not a public address: {why} (SLUICE_PUSH_ALLOW_PRIVATE=true allows it)"))
        }
    }
}

/// A resolver that answers only public addresses: a name resolving to none is refused.
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (public, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                found.into_iter().partition(|a| is_public(a.ip()));
            if public.is_empty() {
                let first = refused.first().map(|a| format!(" ({}: {})", a.ip(), refusal(a.ip()).unwrap_or_default()));
                let refused: Box<dyn std::error::Error + Send + Sync> =
                    format!("refused: {host} resolves to no public address{}", first.unwrap_or_default()).into();
                return Err(refused);
            }
            let addrs: Addrs = Box::new(public.into_iter());
            Ok(addrs)
        })
    }
}
