"""Split a single CSV line into fields, honouring double-quoted fields."""


def split_fields(line, sep=","):
    fields, current, in_quotes, i = [], [], False, 0
    while i < len(line):
        char = line[i]
        if in_quotes:
            if char == '"':
                in_quotes = False
            else:
                current.append(char)
        elif char == '"':
            in_quotes = True
        elif char == sep:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    if in_quotes:
        raise ValueError("unterminated quoted field")
    fields.append("".join(current))
    return fields
