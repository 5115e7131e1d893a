/**
 * `general.size_label`: a model's parameter count as llama.cpp's converter spells it ("135M",
 * "8.0B", "1.5B", "70B") — at least two significant digits, K/M/B/T by the count's magnitude
 * (strictly above 1e6, 1e9, 1e12), the count multiplied by 1e-3 … 1e-12 in double precision and
 * printed with Python's fixed-point formatting: round half to even on the exact binary value,
 * which is not what JavaScript's toFixed does on ties (2.5 → "2" there, "3" here by toFixed).
 */

/** Python's f"{x:.{digits}f}" for a finite x ≥ 0. */
export function pythonFixed(x: number, digits: number): string {
  // toFixed(100) spells the double's exact binary value (doubles in this range need fewer digits)
  const exact = x.toFixed(100);
  const point = exact.indexOf('.');
  const kept = exact.slice(0, point + 1 + digits).replace(/\.$/, '');
  const rest = exact.slice(point + 1 + digits);
  const half = /^50*$/.test(rest);
  const up = rest[0]! > '5' || (rest[0] === '5' && !half) || (half && isOdd(kept));
  return up ? incrementDecimal(kept) : kept;
}

function isOdd(decimal: string): boolean {
  return Number(decimal[decimal.length - 1]) % 2 === 1;
}

/** "1.99" → "2.00", "9" → "10": adds one unit in the last place of a non-negative decimal. */
function incrementDecimal(decimal: string): string {
  const digits = decimal.split('');
  for (let i = digits.length - 1; i >= 0; i--) {
    if (digits[i] === '.') continue;
    if (digits[i] !== '9') {
      digits[i] = String(Number(digits[i]) + 1);
      return digits.join('');
    }
    digits[i] = '0';
  }
  return `1${digits.join('')}`;
}

/** Python's round(x) (half to even) as a digit string, for the significant-digit count. */
function roundedDigits(x: number): string {
  return pythonFixed(x, 0);
}

export function sizeLabel(parameters: number): string {
  const [scaled, suffix] =
    parameters > 1e12
      ? [parameters * 1e-12, 'T']
      : parameters > 1e9
        ? [parameters * 1e-9, 'B']
        : parameters > 1e6
          ? [parameters * 1e-6, 'M']
          : [parameters * 1e-3, 'K'];
  const integerDigits = roundedDigits(scaled).replace(/^0+/, '').length;
  return `${pythonFixed(scaled, Math.max(2 - integerDigits, 0))}${suffix}`;
}
