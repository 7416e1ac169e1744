"""Drives Evident's web page in headless Chromium (Debian's chromium and chromedriver, through
Selenium): sign in with a token, upload a PDF and wait for it to be ready, ask a question with a
profile, open the first citation and wait for its page image. Saves a screenshot. Exits
non-zero, with the page's error text, on any failure. Used by tests/server.rs."""
import argparse
import shutil
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

parser = argparse.ArgumentParser()
parser.add_argument("--url", required=True)
parser.add_argument("--token", required=True)
parser.add_argument("--pdf", required=True)
parser.add_argument("--question", required=True)
parser.add_argument("--profile", required=True)
parser.add_argument("--screenshot", required=True)
parser.add_argument("--compare", help="two profiles, A,B: ask again with A and compare with B beside it")
args = parser.parse_args()

chromium = shutil.which("chromium") or shutil.which("chromium-browser")
driver_path = shutil.which("chromedriver")
if not chromium or not driver_path:
    print("FAILED: chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver; scripts/setup.sh does it)")
    sys.exit(1)

options = webdriver.ChromeOptions()
options.binary_location = chromium
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1600"]:
    options.add_argument(flag)
driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)


def fail(what):
    try:
        driver.save_screenshot(args.screenshot)
        errors = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".error") if e.text]
        uploads = driver.find_element(By.ID, "uploads").text
    except Exception:  # the page itself may be gone
        errors, uploads = [], ""
    print(f"FAILED: {what}; page errors: {errors}; uploads: {uploads!r}")
    driver.quit()
    sys.exit(1)


def wait(seconds, condition, what):
    try:
        return WebDriverWait(driver, seconds).until(condition)
    except Exception:
        fail(what)


try:
    driver.get(args.url)
    # A wrong token is refused on the page.
    driver.find_element(By.ID, "token").send_keys("wrong-token")
    driver.find_element(By.ID, "signin").click()
    wait(30, lambda d: "not valid" in d.find_element(By.ID, "signin-error").text, "a wrong token is refused")
    token = driver.find_element(By.ID, "token")
    token.clear()
    token.send_keys(args.token)
    driver.find_element(By.ID, "signin").click()
    wait(30, EC.visibility_of_element_located((By.ID, "app")), "signing in shows the app")
    print("signed in")

    driver.find_element(By.ID, "file").send_keys(args.pdf)
    driver.find_element(By.ID, "upload").click()
    wait(600, lambda d: d.find_elements(By.CSS_SELECTOR, "#uploads .upload[data-state]"), "the upload finishes")
    state = driver.find_element(By.CSS_SELECTOR, "#uploads .upload").get_attribute("data-state")
    if state != "done":
        fail("the upload is ready")
    wait(30, lambda d: d.find_elements(By.CSS_SELECTOR, "#docs li[data-indexed='true']"), "the document is listed as indexed")
    print("uploaded:", driver.find_element(By.ID, "uploads").text.replace("\n", " "))

    Select(driver.find_element(By.ID, "profile")).select_by_value(args.profile)
    driver.find_element(By.ID, "question").send_keys(args.question)
    driver.find_element(By.ID, "ask").click()
    wait(600, lambda d: d.find_elements(By.CSS_SELECTOR, "#citations a.citation") or any(e.text for e in d.find_elements(By.ID, "ask-error")), "an answer with citations arrives")
    citations = driver.find_elements(By.CSS_SELECTOR, "#citations a.citation")
    if not citations:
        fail("the answer cites pages")
    stages = driver.find_element(By.ID, "stages").text
    if "memory" not in stages:
        fail(f"the stages are shown as they run ({stages!r})")
    print("answer:", driver.find_element(By.ID, "answer").text, "|", citations[0].text)

    citations[0].click()
    wait(60, lambda d: d.find_element(By.ID, "page-image").get_attribute("data-loaded") == "true", "the cited page image loads")
    width = driver.execute_script("return document.getElementById('page-image').naturalWidth")
    if not width or width < 100:
        fail(f"the page image has a size ({width})")
    driver.execute_script("document.getElementById('viewer').scrollIntoView()")
    time.sleep(0.3)
    driver.save_screenshot(args.screenshot)
    print("citation opened: page image", width, "px wide; screenshot", args.screenshot)

    if args.compare:
        first, second = args.compare.split(",")
        Select(driver.find_element(By.ID, "profile")).select_by_value(first)
        Select(driver.find_element(By.ID, "compare")).select_by_value(second)
        driver.find_element(By.ID, "ask").click()
        wait(120, lambda d: d.find_element(By.ID, "result-2").is_displayed() or any(e.text for e in d.find_elements(By.ID, "ask-error")), "the second profile's answer arrives")
        if not driver.find_element(By.ID, "result-2").is_displayed():
            fail("the compared answer is shown (" + driver.find_element(By.ID, "ask-error").text + ")")
        costs = [driver.find_element(By.ID, i).text for i in ("cost", "cost-2")]
        if not (costs[0].startswith(first + ":") and costs[1].startswith(second + ":")):
            fail(f"each side names its profile ({costs!r})")
        print("compared:", " | ".join(costs))
finally:
    driver.quit()
