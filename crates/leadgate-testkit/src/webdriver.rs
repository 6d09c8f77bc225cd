//! Driving the console's UI through WebDriver, in the Tauri window (tauri-driver) or in a
//! browser (chromedriver): a session, finding and clicking what a person would, waiting
//! for text, and the README's screenshots. A step that does not happen in time fails
//! with the page's source and a screenshot in the temporary directory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
pub use fantoccini::Client;
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;

/// How long a step may take to show on screen.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// A WebDriver session at `driver` (`http://127.0.0.1:PORT`) with `capabilities`,
/// retried while the driver starts.
pub async fn session(
    driver: &str,
    capabilities: serde_json::Map<String, serde_json::Value>,
) -> Client {
    // Two TLS backends are linked in the workspace; WebDriver runs over plain HTTP, but
    // rustls insists on a chosen provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match ClientBuilder::rustls()
            .expect("tls")
            .capabilities(capabilities.clone())
            .connect(driver)
            .await
        {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for the WebDriver at {driver}: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("no WebDriver session at {driver}: {e}"),
        }
    }
}

pub fn css(s: &str) -> Locator<'_> {
    Locator::Css(s)
}

async fn failure_shot(c: &Client) {
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::write(std::env::temp_dir().join("leadgate-e2e-failure.png"), png);
    }
}

/// Clicks the element once it is there. The console re-renders on each poll, so an
/// element found a moment ago may be gone by the click: it is then found again.
pub async fn click(c: &Client, selector: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match el(c, selector).await.click().await {
            Ok(()) => return,
            Err(e) if e.is_stale_element_reference() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                failure_shot(c).await;
                panic!("could not click `{selector}`: {e}");
            }
        }
    }
}

/// The element, once it is there.
pub async fn el(c: &Client, selector: &str) -> Element {
    match c.wait().at_most(PATIENCE).for_element(css(selector)).await {
        Ok(e) => e,
        Err(e) => {
            let page = c.source().await.unwrap_or_default();
            let text = page.chars().take(3000).collect::<String>();
            failure_shot(c).await;
            panic!("no `{selector}` on screen: {e}\npage: {text}")
        }
    }
}

/// Types `text` into the field at `selector`.
pub async fn type_into(c: &Client, selector: &str, text: &str) {
    el(c, selector).await.send_keys(text).await.unwrap();
}

/// Waits until the element's text satisfies `pred`.
pub async fn text_until(
    c: &Client,
    selector: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = None;
    loop {
        if let Ok(e) = c.find(css(selector)).await {
            if let Ok(mut t) = e.text().await {
                // WebKitWebDriver reads no text inside a <button> (queue rows are
                // buttons): the DOM's text content then.
                if t.is_empty() {
                    if let Ok(v) = c
                        .execute(
                            "const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : '';",
                            vec![json!(selector)],
                        )
                        .await
                    {
                        t = v.as_str().unwrap_or_default().to_owned();
                    }
                }
                if pred(&t) {
                    return t;
                }
                seen = Some(t);
            }
        }
        if Instant::now() > deadline {
            failure_shot(c).await;
            let page = c.source().await.unwrap_or_default();
            panic!("`{selector}` never showed {what} (last seen: {seen:?})\npage: {page}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens the queue row of `operation` and waits for its case.
pub async fn open_row(c: &Client, operation: &str) {
    click(
        c,
        &format!("[data-testid=queue-row][data-operation='{operation}']"),
    )
    .await;
    text_until(c, "[data-testid=case-key]", operation, |t| t == operation).await;
}

/// Picks `value` in the `<select>` at `selector`.
pub async fn choose(c: &Client, selector: &str, value: &str) {
    el(c, selector).await.select_by_value(value).await.unwrap();
}

pub async fn tab(c: &Client, name: &str) {
    click(c, &format!("[data-testid=tab-{name}]")).await;
}

/// Saves a screenshot as `docs/screenshots/{name}` (the README shows them).
pub async fn shot(c: &Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    // WebKit hands out the last painted frame: let the latest change reach the screen.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(dir.join(name), png).unwrap();
}
