import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Reads a `Retry-After` header: a number of seconds, or an HTTP date (RFC 9110 §10.2.3: the
/// IMF-fixdate, and the obsolete RFC 850 and asctime forms).
public enum RetryAfter {
    /// The wait a `Retry-After` value asks for, counted from `now`; `nil` when the value is neither
    /// form. A date in the past asks for no wait.
    ///
    /// ```swift
    /// RetryAfter.wait(for: "120")                             // .seconds(120)
    /// RetryAfter.wait(for: "Wed, 21 Oct 2015 07:28:00 GMT")   // from now until then
    /// ```
    ///
    /// - Parameters:
    ///   - value: The header's value.
    ///   - now: The time to count from. Default: now.
    /// - Returns: The wait, never negative.
    public static func wait(for value: String, now: Date = Date()) -> Duration? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if !text.isEmpty, text.allSatisfy(\.isASCII), text.allSatisfy(\.isNumber) {
            // Seconds; a number too large for 64 bits saturates (a `Duration` holds `Int64.max` seconds).
            return .seconds(Int64(text) ?? Int64.max)
        }
        for format in formats {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: text) {
                return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
            }
        }
        return nil
    }

    /// The wait a response's `Retry-After` header asks for, if it has one that can be read.
    ///
    /// - Parameters:
    ///   - response: The response.
    ///   - now: The time to count from. Default: now.
    /// - Returns: The wait, or `nil`.
    public static func wait(in response: HTTPURLResponse, now: Date = Date()) -> Duration? {
        response.value(forHTTPHeaderField: "Retry-After").flatMap { wait(for: $0, now: now) }
    }

    private static let formats = ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"]
}
