/// The provider's few HTML pages: sign-in, device code entry, results and errors.
enum HTMLPage {
    /// The sign-in page of the authorization endpoint.
    ///
    /// The form has no `action`, so it posts to the same URL, query included: the POST carries the authorization
    /// request's parameters in the query and the user's answer (`username`, or `action=deny`) in the body.
    static func signIn(clientID: String, loginHint: String?, problem: String? = nil) -> String {
        document(
            title: "Sign in",
            body: """
                <h1>Sign in</h1>
                <p>Application <code>\(escape(clientID))</code> wants you to sign in.</p>
                \(problem.map { "<p class=\"problem\">\(escape($0))</p>" } ?? "")
                <form method="post">
                <label for="username">Username</label>
                <input type="text" id="username" name="username" value="\(escape(loginHint ?? ""))" autofocus>
                <button type="submit">Sign in</button>
                <button type="submit" name="action" value="deny">Cancel</button>
                </form>
                """
        )
    }

    /// The device code entry page.
    static func deviceLogin(userCode: String?, problem: String? = nil) -> String {
        document(
            title: "Enter code",
            body: """
                <h1>Enter code</h1>
                \(problem.map { "<p class=\"problem\">\(escape($0))</p>" } ?? "")
                <form method="post" action="/devicelogin">
                <label for="user_code">Code</label>
                <input type="text" id="user_code" name="user_code" value="\(escape(userCode ?? ""))" autofocus>
                <label for="username">Username</label>
                <input type="text" id="username" name="username" value="">
                <button type="submit">Sign in</button>
                <button type="submit" name="action" value="deny">Cancel</button>
                </form>
                """
        )
    }

    /// A page that only says something.
    static func message(title: String, _ text: String) -> String {
        document(title: title, body: "<h1>\(escape(title))</h1>\n<p>\(escape(text))</p>")
    }

    /// The body of a redirect, for clients that show it.
    static func redirect(to location: String) -> String {
        document(title: "Redirecting", body: "<p><a href=\"\(escape(location))\">Continue</a></p>")
    }

    /// `text` with the HTML-special characters escaped, for element content and quoted attributes.
    static func escape(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    private static func document(title: String, body: String) -> String {
        """
        <!DOCTYPE html>
        <html lang="en">
        <head><meta charset="utf-8"><title>\(escape(title)) - tokenbroker test identity provider</title></head>
        <body>
        \(body)
        </body>
        </html>

        """
    }
}
