"""Python AST -> tile IR: parsing, constexpr folding, inlining, typing, layout inference."""
