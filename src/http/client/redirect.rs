//! The redirect policy: which answers are followed, where to, and with which headers.

use super::error::HttpError;
use super::request::{HttpRequest, Method};
use super::url::resolve_location;

/// Redirects followed per call.
pub const REDIRECTS_MAX: usize = 3;

/// The next request when `status`/`location` is a redirect this client follows: any of
/// 301/302/303/307/308 for GET, only 307/308 for other methods (same method and body).
/// `Authorization` and `Cookie` are dropped when the redirect leaves the origin.
pub(super) fn redirect(
    req: &HttpRequest,
    status: u16,
    location: Option<&str>,
) -> Result<Option<HttpRequest>, HttpError> {
    let follows = match req.method {
        Method::Get => matches!(status, 301 | 302 | 303 | 307 | 308),
        _ => matches!(status, 307 | 308),
    };
    let Some(location) = location.filter(|_| follows) else {
        return Ok(None);
    };
    let url = resolve_location(&req.url, location)?;
    let mut next = req.clone();
    if !url.same_origin(&req.url) {
        next.headers.retain(|(n, _)| {
            !n.eq_ignore_ascii_case("authorization") && !n.eq_ignore_ascii_case("cookie")
        });
    }
    next.url = url;
    Ok(Some(next))
}

#[cfg(test)]
mod tests {
    use super::super::url::parse_url;
    use super::*;

    #[test]
    fn redirects_drop_credentials_when_leaving_the_origin() {
        let mut req = HttpRequest::get(parse_url("http://h/a").unwrap());
        req.headers = vec![
            ("Authorization".into(), "Bearer s".into()),
            ("Cookie".into(), "c=1".into()),
            ("Accept".into(), "application/json".into()),
        ];
        let same = redirect(&req, 302, Some("/b")).unwrap().unwrap();
        assert_eq!(same.headers.len(), 3);
        let other = redirect(&req, 301, Some("http://o/b")).unwrap().unwrap();
        assert_eq!(
            other.headers,
            vec![("Accept".into(), "application/json".into())]
        );
        let upgraded = redirect(&req, 301, Some("https://h/b")).unwrap().unwrap();
        assert_eq!(
            upgraded.headers.len(),
            1,
            "another scheme is another origin"
        );
        assert!(redirect(&req, 302, None).unwrap().is_none());
        assert!(redirect(&req, 304, Some("/b")).unwrap().is_none());
        let mut post = req.clone();
        post.method = Method::Post;
        assert!(redirect(&post, 302, Some("/b")).unwrap().is_none());
        assert_eq!(
            redirect(&post, 307, Some("/b")).unwrap().unwrap().method,
            Method::Post
        );
    }
}
