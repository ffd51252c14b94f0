//! What a run asked of AWS, counted as the adapters would send it, and its price.

use super::params::price;

/// Requests and units, by service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meter {
    pub ddb_get: u64,
    pub ddb_query: u64,
    /// `UpdateItem` / `DeleteItem` of one item.
    pub ddb_write: u64,
    pub ddb_tx: u64,
    pub ddb_batch: u64,
    pub wru: u64,
    pub rru: u64,
    pub s3_put: u64,
    pub s3_get: u64,
    pub s3_other: u64,
    pub lambda_invocations: u64,
    /// Billed duration × memory, GB-milliseconds.
    pub lambda_gb_ms: f64,
    pub apigw: u64,
    pub cold_starts: u64,
    /// Transactions cancelled, or single writes refused, for a transaction in flight on an item.
    pub conflicts: u64,
    /// Requests refused for going too fast: DynamoDB, S3, Lambda or API Gateway.
    pub throttles: u64,
}

impl Meter {
    /// Every AWS request (throttled attempts included: they are sent).
    pub fn requests(&self) -> u64 {
        self.ddb_get
            + self.ddb_query
            + self.ddb_write
            + self.ddb_tx
            + self.ddb_batch
            + self.s3_put
            + self.s3_get
            + self.s3_other
            + self.lambda_invocations
            + self.apigw
    }

    /// The bill, in dollars.
    pub fn dollars(&self) -> f64 {
        self.wru as f64 * price::WRU
            + self.rru as f64 * price::RRU
            + self.s3_put as f64 * price::S3_PUT
            + self.s3_get as f64 * price::S3_GET
            + self.apigw as f64 * price::APIGW
            + self.lambda_invocations as f64 * price::LAMBDA_REQUEST
            + self.lambda_gb_ms / 1000.0 * price::LAMBDA_GB_S
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_of_one_inline_event_costs_what_aws_md_says() {
        // docs/AWS.md, batch 1: 8 WRU, one API Gateway request, one invocation of 30 ms at 512 MB.
        let m = Meter { wru: 8, apigw: 1, lambda_invocations: 1, lambda_gb_ms: 30.0 * 0.5, ..Meter::default() };
        assert!((m.dollars() * 1e6 - 6.40).abs() < 0.01, "{}", m.dollars() * 1e6);
    }
}
