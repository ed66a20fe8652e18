//! The browser tests, in their own binary: they drive headless Chromium (and fail without
//! it), through the CDP drivers next to this file (`cdp_driver.py`, `demo_driver.py`).

#[path = "../support/mod.rs"]
mod support;

mod dashboard_browser;
mod demo_browser;
