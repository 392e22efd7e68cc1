extension Optional where Wrapped: AnyObject {
    /// The object, made by `make` and stored here the first time: for state kept out of line because
    /// few values ever need it (an operation's `Extras`, a record's `Extra`).
    mutating func made(by make: () -> Wrapped) -> Wrapped {
        if let self { return self }
        let made = make()
        self = made
        return made
    }
}
