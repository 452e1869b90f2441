extension URLTaskError.Component {
    /// The components of one chain, identified by index and named by type, with `#index` after
    /// the name of each type that occurs more than once (two `OAuth2RefreshReactor`s for two
    /// backends are `OAuth2RefreshReactor#0` and `OAuth2RefreshReactor#1`), so that an error or
    /// an event never leaves the reader guessing which one it was.
    static func chain(_ components: [Any], kind: Kind) -> [URLTaskError.Component] {
        let names = components.map { String(describing: type(of: $0)) }
        let counts = Dictionary(names.map { ($0, 1) }, uniquingKeysWith: +)
        return names.enumerated().map { index, name in
            URLTaskError.Component(kind: kind, index: index, name: counts[name, default: 0] > 1 ? "\(name)#\(index)" : name)
        }
    }
}
