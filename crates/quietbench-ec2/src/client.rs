//! Reaching EC2 the AWS way: aws-config's default chain (environment, profiles, SSO, IMDS,
//! ECS) for credentials and region, with `--profile`, `--region` and `--endpoint-url` (and the
//! SDK's own `AWS_ENDPOINT_URL_EC2`) on top.

use std::net::IpAddr;

use aws_config::{BehaviorVersion, Region, SdkConfig};

/// Where and as whom to call EC2; each `None` leaves the default chain's answer.
#[derive(Debug, Clone, Default)]
pub struct Ec2Options {
    /// `--region`.
    pub region: Option<String>,
    /// `--profile`: a profile of ~/.aws/config.
    pub profile: Option<String>,
    /// `--endpoint-url`: another EC2 endpoint (a test server, a VPC endpoint).
    pub endpoint_url: Option<String>,
}

/// The EC2 and STS clients of one configuration.
#[derive(Debug, Clone)]
pub struct Ec2 {
    /// The EC2 API.
    pub ec2: aws_sdk_ec2::Client,
    /// `None` for a client made from an EC2 client alone.
    sts: Option<aws_sdk_sts::Client>,
    region: String,
    endpoint_url: Option<String>,
}

impl Ec2 {
    /// Resolves credentials and region through the default chain with `options` on top.
    pub async fn connect(options: &Ec2Options) -> anyhow::Result<Self> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = &options.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(profile) = &options.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(url) = &options.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let config = loader.load().await;
        Self::from_config(&config)
    }

    /// From a loaded SDK configuration (tests build one with fixed credentials).
    pub fn from_config(config: &SdkConfig) -> anyhow::Result<Self> {
        let Some(region) = config.region() else {
            anyhow::bail!(
                "no AWS region: give --region, set AWS_REGION, or set region in the profile"
            );
        };
        // The EC2 client's own endpoint wins (AWS_ENDPOINT_URL_EC2 over AWS_ENDPOINT_URL).
        let ec2 = aws_sdk_ec2::Client::new(config);
        let endpoint_url = std::env::var("AWS_ENDPOINT_URL_EC2")
            .ok()
            .or_else(|| config.endpoint_url().map(str::to_string));
        Ok(Self {
            ec2,
            sts: Some(aws_sdk_sts::Client::new(config)),
            region: region.to_string(),
            endpoint_url,
        })
    }

    /// From an EC2 client alone, e.g. one whose requests a test intercepts: it has no STS, so
    /// [`Ec2::caller_identity`] fails.
    pub fn from_client(ec2: aws_sdk_ec2::Client) -> Self {
        let region = ec2
            .config()
            .region()
            .map_or("unknown".into(), |r| r.to_string());
        Self {
            ec2,
            sts: None,
            region,
            endpoint_url: None,
        }
    }

    /// The region calls go to.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The caller's identity (an ARN), for the owner tag.
    pub async fn caller_identity(&self) -> anyhow::Result<String> {
        let Some(sts) = &self.sts else {
            anyhow::bail!("this EC2 client has no STS client to ask who the caller is");
        };
        let out = sts
            .get_caller_identity()
            .send()
            .await
            .map_err(|e| explain("sts:GetCallerIdentity", e))?;
        out.arn()
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("sts:GetCallerIdentity answered without an ARN"))
    }

    /// Whether calls go to a server on this machine (a test EC2 such as moto): the addresses it
    /// invents for instances must then never be dialled.
    pub fn endpoint_is_loopback(&self) -> bool {
        self.endpoint_url.as_deref().is_some_and(url_is_loopback)
    }
}

/// Whether an endpoint URL names this machine.
pub fn url_is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// An SDK error as one line: the operation and the service's error code and message, or the
/// HTTP status of an answer that carried no EC2 error, or the transport failure with its causes.
pub fn explain<E>(
    operation: &str,
    err: aws_sdk_ec2::error::SdkError<E, aws_sdk_ec2::config::http::HttpResponse>,
) -> anyhow::Error
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    use aws_sdk_ec2::error::SdkError;
    let what = match &err {
        SdkError::ServiceError(service) => match (service.err().code(), service.err().message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.to_string(),
            _ => format!(
                "HTTP {} without an EC2 error in the answer",
                service.raw().status().as_u16()
            ),
        },
        other => aws_sdk_ec2::error::DisplayErrorContext(other).to_string(),
    };
    anyhow::anyhow!("{operation} failed: {what}")
}

/// The service's error code of an SDK error, where it has one (e.g. "InvalidGroup.InUse").
pub fn error_code<E, R>(err: &aws_sdk_ec2::error::SdkError<E, R>) -> Option<&str>
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata,
{
    use aws_sdk_ec2::error::ProvideErrorMetadata;
    err.as_service_error().and_then(ProvideErrorMetadata::code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_endpoints_are_recognised() {
        for url in [
            "http://127.0.0.1:5000",
            "http://localhost:5000/",
            "https://[::1]:443/x",
            "127.0.0.2:80",
        ] {
            assert!(url_is_loopback(url), "{url}");
        }
        for url in [
            "https://ec2.us-east-1.amazonaws.com",
            "http://10.0.0.1:5000",
            "http://[2001:db8::1]:5000",
        ] {
            assert!(!url_is_loopback(url), "{url}");
        }
    }
}
