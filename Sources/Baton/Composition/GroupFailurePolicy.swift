/// What a group does when one of its children fails.
public enum GroupFailurePolicy: Sendable, Hashable {
    /// Let the other children run to the end; the group fails afterwards with every error.
    case continueOnFailure
    /// Cancel the other children at the first failure.
    case cancelSiblingsOnFailure
}
