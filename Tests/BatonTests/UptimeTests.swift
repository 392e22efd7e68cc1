import Dispatch
import XCTest

@testable import Baton

/// `Uptime` reads the clock of `DispatchTime.now()`: a recorder's times stay comparable with
/// everything Baton times with `DispatchTime`.
final class UptimeTests: XCTestCase {
    func testAReadFallsBetweenTwoReadsOfDispatchTime() {
        for _ in 0..<1_000 {
            let before = DispatchTime.now().uptimeNanoseconds
            let read = Uptime.nanoseconds()
            let after = DispatchTime.now().uptimeNanoseconds
            XCTAssertLessThanOrEqual(before, read)
            XCTAssertLessThanOrEqual(read, after)
        }
    }

    func testReadsNeverGoBack() {
        var last = Uptime.nanoseconds()
        for _ in 0..<10_000 {
            let read = Uptime.nanoseconds()
            XCTAssertGreaterThanOrEqual(read, last)
            last = read
        }
    }
}
